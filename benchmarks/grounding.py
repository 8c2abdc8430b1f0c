"""Grounding: does verification reject a claim its spans do not state, and keep one they do?

Claims are made in code from the evidence spans of a suite's documents (read and chunked as ingestion
does, no store needed), so each has a known label. Every claim is verified as the answer workflow
verifies a sentence: the value checks in code (:func:`check_values`), a word-for-word copy accepted
without a judge, else the judge model's p(yes) that the claim's spans state it (the prompt's prefix is
the span's chunk as source S1, as in the workflow).

Faithful claims (they should be accepted):

* ``row restated``: a table row as a sentence, each cell named by its column ("The Fee of Passport is $25.");
* ``sentence framed``: a sentence span behind "The document states that".

Perturbed claims (they should be rejected), each one span changed in one way:

* ``negation``: "not" put after the first auxiliary or modal ("must" -> "must not"), or taken out;
* ``subject swap``: the word before the first auxiliary (the subject's head) replaced by a content word of
  another document;
* ``number``: a number changed (the last digit up by one); ``month``: a month name changed to the next;
  ``unit``: a time unit after a number changed to its neighbour (days -> weeks);
* ``other row``: the restated row of one table row, resting on another row of the same table;
* ``other code``: an identifier replaced by an identifier of another document.

A claim that fails the checks in code never reaches the judge (as in the workflow). Printed, per suite and
family: claims, the share rejected by code, the share accepted at the fitted threshold, and the judge's
p(yes) median. The threshold is fitted on the first suite (the dev documents by default) as the one that
maximises the worst of (faithful accepted, each perturbed family rejected), and measured in-sample there
and held out on the second (the public documents, whose questions are not used).

Limits: the claims are code-made, so their wording is plainer than a model's rewrites; faithful claims
stay close to their span.

    .venv/bin/python benchmarks/grounding.py [--suites DIR,DIR] [--per-family 25] [--save out.json]
        [--load out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml
from _common import SHARED, temp_data_dir
from llama_index.core.utils import get_tokenizer

from enterprise_rag.answer.checks.draft import Sentence
from enterprise_rag.answer.checks.support import Judge
from enterprise_rag.answer.checks.verification import check_values, copies_its_spans
from enterprise_rag.config import load_settings
from enterprise_rag.ingest.chunking import build_chunks
from enterprise_rag.ingest.readers import read_document
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.providers.registry import Providers
from enterprise_rag.schema.sources import Source
from enterprise_rag.schema.spans import Span, number_spans
from enterprise_rag.text import STOPWORDS, identifiers, terms, words

FAITHFUL = ("row restated", "sentence framed")
PERTURBED = ("negation", "subject swap", "number", "month", "unit", "other row", "other code")
_AUXILIARY = re.compile(
    r"\b(must|may|can|will|should|shall|would|could|is|are|was|were|has|have|does|do)\b(?!\s+not\b)", re.IGNORECASE
)
_NEGATION = re.compile(r"\s+(?:not|never)\b|(?<=\w)n't\b", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")  # fmt: skip
_MONTH = re.compile(r"\b(" + "|".join(_MONTHS) + r")\b")
_UNITS = {"day": "week", "week": "month", "month": "year", "year": "month", "hour": "minute", "minute": "hour",
          "second": "minute"}  # fmt: skip
_UNIT = re.compile(r"(?<=\d )(" + "|".join(_UNITS) + r")(s?)\b", re.IGNORECASE)


@dataclass
class Claim:
    suite: str
    family: str
    text: str
    span: str  # the span it rests on, as the judge reads it
    code_reasons: list[str]
    copy: bool = False
    p_yes: float | None = None  # None: rejected by code, or a copy (no judge)

    @property
    def faithful(self) -> bool:
        return self.family in FAITHFUL

    def accepted(self, threshold: float) -> bool:
        if self.code_reasons:
            return False
        return self.copy or (self.p_yes is not None and self.p_yes >= threshold)


@dataclass
class Document:
    name: str
    sources: list[tuple[Source, list[Span]]]  # each leaf chunk as source S1, with its spans


def documents(suite: Path) -> list[Document]:
    """The suite's documents, each as its leaf chunks (read and chunked as ingestion does)."""
    settings = load_settings(None).ingest
    tokenizer = get_tokenizer()  # what ingestion sizes chunks with
    spec = yaml.safe_load((suite / "scenarios.yaml").read_text())
    out = []
    for doc in spec["documents"]:
        path = suite / doc["path"]
        loaded = read_document(path, int(settings.max_file_mb * 1024 * 1024))
        chunks = build_chunks(
            loaded, doc["path"], settings.chunk_sizes, settings.chunk_overlap, lambda text: len(tokenizer(text))
        )
        sources = []
        for chunk in (c for c in chunks if c.is_leaf):
            source = Source("S1", chunk.text, str(path), None, loaded.title, chunk.breadcrumb, None, "current",
                            doc["path"])  # fmt: skip
            sources.append((source, number_spans([("S1", chunk.text)])))
        out.append(Document(doc["path"], sources))
    return out


def _lower_first(text: str) -> str:
    """``text`` with its first letter in lower case, unless its first word is an acronym or a code."""
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def restated(span: Span) -> str | None:
    """A table row as a sentence: ``The <column> of <first cell> is <cell>.`` for each further cell."""
    if span.kind != "row" or not span.context:
        return None
    names = [c.strip() for c in span.context.strip().strip("|").split("|")]
    cells = [c.strip() for c in span.text.strip().strip("|").split("|")]
    if len(names) != len(cells) or len(cells) < 2 or not cells[0] or any(c.isdigit() for n in names for c in n):
        return None  # a header with figures is a data row taken for one (a table continued without its header)
    parts = [f"the {n} of {cells[0]} is {c}" for n, c in zip(names[1:], cells[1:], strict=True) if n and c]
    return (" and ".join(parts)[:1].upper() + " and ".join(parts)[1:] + ".") if parts else None


def _plain(span: Span) -> str:
    return re.sub(r"^\s*(?:[-*+\u2022]|\d{1,3}[.)])\s+", "", span.text).strip()


def negated(text: str) -> str | None:
    if m := _NEGATION.search(text):
        return text[: m.start()] + text[m.end() :]
    if m := _AUXILIARY.search(text):
        word = m.group(1)
        return text[: m.end()] + ("not" if word.lower() == "can" else " not") + text[m.end() :]
    return None


def subject_swapped(text: str, others: list[str], rng: random.Random) -> str | None:
    """The last word before the first auxiliary (the subject's head) replaced by a word of another document."""
    m = _AUXILIARY.search(text)
    if m is None:
        return None
    before = list(re.finditer(r"[A-Za-z]{4,}", text[: m.start()]))
    if not before or before[-1].group().lower() in STOPWORDS:
        return None
    head = before[-1]
    own = set(words(text))
    choices = [w for w in others if w not in own]
    if not choices:
        return None
    word = rng.choice(choices)
    word = word.capitalize() if head.group()[0].isupper() else word
    return text[: head.start()] + word + text[head.end() :]


def number_changed(text: str) -> str | None:
    if not (m := _NUMBER.search(text)):
        return None
    value = m.group()
    return text[: m.end() - 1] + str((int(value[-1]) + 1) % 10) + text[m.end() :]


def month_changed(text: str) -> str | None:
    if not (m := _MONTH.search(text)):
        return None
    following = _MONTHS[(_MONTHS.index(m.group()) + 1) % 12]
    return text[: m.start()] + following + text[m.end() :]


def unit_changed(text: str) -> str | None:
    if not (m := _UNIT.search(text)):
        return None
    unit = _UNITS[m.group(1).lower()]
    return text[: m.start()] + unit + m.group(2) + text[m.end() :]


def codes(text: str) -> set[str]:
    """The identifiers of ``text`` written in capitals (``KV-12``; not ``14-day`` or ``20th``)."""
    out = set()
    for code in identifiers(text):
        m = re.search(re.escape(code), text, re.IGNORECASE)
        if m is not None and not any(ch.islower() for ch in m.group()):
            out.add(code)
    return out


def code_changed(text: str, other_codes: list[str], rng: random.Random) -> str | None:
    own = codes(text)
    if not own or not (choices := [c for c in other_codes if c not in own]):
        return None
    code = sorted(own)[0]
    m = re.search(re.escape(code), text, re.IGNORECASE)
    assert m is not None
    return text[: m.start()] + rng.choice(choices).upper() + text[m.end() :]


def candidates(docs: list[Document], rng: random.Random) -> Iterator[tuple[str, str, Source, tuple[Span, ...]]]:
    """(family, claim text, source, spans it rests on) for every claim the documents allow, chunk by chunk in
    random order (claims of one chunk together, so the judge's calls share their prefix)."""
    out: list[list[tuple[str, str, Source, tuple[Span, ...]]]] = []
    for doc in docs:
        other_words = sorted({t for d in docs if d is not doc for s, _ in d.sources for t in terms(s.text)
                              if len(t) >= 4 and t.isalpha()})  # fmt: skip
        other_codes = sorted({c for d in docs if d is not doc for s, _ in d.sources for c in codes(s.text)})
        for source, spans in doc.sources:
            out.append(chunk := [])
            rows = [s for s in spans if s.kind == "row"]
            for span in spans:
                text = _plain(span)
                if span.kind == "row":
                    if (claim := restated(span)) is not None:
                        chunk.append(("row restated", claim, source, (span,)))
                        for other in rows:
                            if other.context == span.context and other.number != span.number:
                                other_claim = restated(other)
                                if other_claim and other_claim != claim:
                                    chunk.append(("other row", other_claim, source, (span,)))
                                    break
                    continue
                if span.kind not in ("sentence", "item") or len(terms(text)) < 3:
                    continue
                if span.kind == "sentence" and text[0].isupper() and text.endswith((".", "!", "?")):
                    chunk.append(("sentence framed", f"The document states that {_lower_first(text)}", source, (span,)))
                for family, changed in (
                    ("negation", negated(text)),
                    ("subject swap", subject_swapped(text, other_words, rng)),
                    ("number", number_changed(text)),
                    ("month", month_changed(text)),
                    ("unit", unit_changed(text)),
                    ("other code", code_changed(text, other_codes, rng)),
                ):
                    if changed is not None and changed != text:
                        chunk.append((family, changed, source, (span,)))
    rng.shuffle(out)
    for chunk in out:
        yield from chunk


def claims(suite_name: str, docs: list[Document], judge: Judge, per_family: int, seed: int) -> list[Claim]:
    rng = random.Random(seed)
    taken: dict[str, int] = defaultdict(int)
    out = []
    for family, text, source, spans in candidates(docs, rng):
        if taken[family] >= per_family:
            continue
        taken[family] += 1
        sentence = Sentence(text, spans)
        finding = check_values(sentence, "")
        claim = Claim(suite_name, family, text, "\n".join(s.with_context() for s in spans), list(finding.reasons))
        if finding.passed:
            claim.copy = copies_its_spans(sentence)
            if not claim.copy:
                claim.p_yes = round(judge.support([source], sentence), 4)
        out.append(claim)
        if len(out) % 25 == 0:
            print(f"  {suite_name}: {len(out)} claims, {sum(c.p_yes is not None for c in out)} judged", flush=True)
    return out


def score(rows: list[Claim], threshold: float) -> float:
    """The worst of: faithful claims accepted, each perturbed family's claims rejected."""
    shares = []
    for family in (*FAITHFUL, *PERTURBED):
        fam = [c for c in rows if c.family == family]
        if fam:
            ok = sum(c.accepted(threshold) == c.faithful for c in fam)
            shares.append(ok / len(fam))
    return min(shares) if shares else 0.0


def fit(rows: list[Claim]) -> float:
    grid = sorted({0.0, 1.0, *(c.p_yes for c in rows if c.p_yes is not None)})
    best = max(score(rows, t) for t in grid)
    winners = [t for t in grid if score(rows, t) == best]
    return winners[len(winners) // 2]  # the middle of the best plateau: the least tuned to its edges


def report(rows: list[Claim], threshold: float, fitted_on: str) -> None:
    print(f"\nthreshold {threshold:.3f}, fitted on {fitted_on} (figures there are in-sample)")
    print(f"{'suite':<16} {'family':<16} {'claims':>6} {'code rej':>8} {'copies':>6} {'accepted':>8} {'p50 p':>6}")
    for suite in dict.fromkeys(c.suite for c in rows):
        for family in (*FAITHFUL, *PERTURBED):
            fam = [c for c in rows if c.suite == suite and c.family == family]
            if not fam:
                continue
            judged = [c.p_yes for c in fam if c.p_yes is not None]
            print(f"{suite:<16} {family:<16} {len(fam):>6} {sum(bool(c.code_reasons) for c in fam) / len(fam):>8.2f} "
                  f"{sum(c.copy for c in fam):>6} {sum(c.accepted(threshold) for c in fam) / len(fam):>8.2f} "
                  f"{statistics.median(judged) if judged else float('nan'):>6.3f}")  # fmt: skip
        suite_rows = [c for c in rows if c.suite == suite]
        faithful = [c for c in suite_rows if c.faithful]
        perturbed = [c for c in suite_rows if not c.faithful]
        print(f"{suite:<16} {'faithful':<16} accepted {sum(c.accepted(threshold) for c in faithful)}/{len(faithful)};"
              f" perturbed rejected {sum(not c.accepted(threshold) for c in perturbed)}/{len(perturbed)};"
              f" worst family {score(suite_rows, threshold):.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", default=f"{SHARED / 'scenarios-dev'},{SHARED / 'scenarios'}",
                        help="comma-separated suite folders; the threshold is fitted on the first")  # fmt: skip
    parser.add_argument("--per-family", type=int, default=25, help="claims per family per suite")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--save", type=Path, default=None, help="write the claims with their p(yes) as JSON")
    parser.add_argument("--load", type=Path, default=None, help="report saved claims (no LLM)")
    args = parser.parse_args()
    if args.load:
        rows = [Claim(**c) for c in json.loads(args.load.read_text())]
    else:
        settings = load_settings(None)
        providers = Providers(settings, temp_data_dir("erag-bench-grounding-"))
        cfg = settings.workflow
        caller = LLMCaller({"grader": providers.grader}, timeout_s=cfg.llm_timeout_s,
                           max_retries=cfg.llm_max_retries, backoff_s=cfg.llm_backoff_s)  # fmt: skip
        judge = Judge(caller, support_threshold=cfg.support_threshold_for(caller.model_id("grader")))
        rows, t0 = [], time.perf_counter()
        for folder in args.suites.split(","):
            suite = Path(folder)
            rows += claims(suite.name, documents(suite), judge, args.per_family, args.seed)
        print(f"{len(rows)} claims, {caller.stats.calls} judge calls, {time.perf_counter() - t0:.0f} s "
              f"(model {caller.model_id('grader')})")  # fmt: skip
        if args.save:
            args.save.write_text(json.dumps([asdict(c) for c in rows], indent=1))
    first = rows[0].suite if rows else ""
    threshold = fit([c for c in rows if c.suite == first])
    report(rows, threshold, first)
    configured = load_settings(None).workflow.support_threshold_fallback
    if abs(configured - threshold) > 1e-9:
        report(rows, configured, "nothing (the configured fallback)")


if __name__ == "__main__":
    sys.exit(main())
