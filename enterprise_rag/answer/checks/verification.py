"""Verifying a draft in code, strictly, before any model checks it.

Each sentence of the draft is checked against the sources it cites:

* a sentence that states something cites at least one source that exists. One with no label whose
  content words are (almost) all in one source is attributed to that source, since it was copied
  from it (a reporting frame such as "The sources state that" is not part of the copy); else it takes
  the labels of the nearest cited sentence after or before it, if they pass every check below (one
  citation at the end of a run of sentences is meant for all of them);
* its evidence is found in each cited source: at least ``MIN_SHARE`` of the sentence's content words
  are in that source (rewording keeps most words of what it restates), and the evidence quoted is the
  source sentence sharing the most of them. A sentence its cited source does not hold but another
  source does (``REATTRIBUTE_SHARE``) is moved to that source, and so is one whose numbers or
  identifiers are missing from its cited source but all in another that holds it (``MIN_SHARE``);
* every number of the sentence appears in one of its verified sources or in the question (the
  user's own figures may be repeated), and every identifier (a token mixing letters and digits) in
  one of its verified sources: a source that does not name the thing asked about says nothing about
  it. Identifiers are compared without their punctuation and spacing ("KV 12" is "kv-12"), from a
  word start. Every web or e-mail address appears as written in one of its verified sources: an
  address is where the user is sent, so one that no cited source gives (the model's invention, or
  an instruction planted elsewhere) never reaches the answer.

A sentence that states nothing (fewer than ``MIN_TERMS`` content words and no number, or a line
introducing a list) needs no source. An uncited question, and an uncited sentence no source holds
that restates the question (``REATTRIBUTE_SHARE`` of its words are the question's), are left out
without a revision: they tell the user nothing. A failing sentence is sent back for one revision with
the reasons (:meth:`Verification.feedback`), then dropped; a draft with no cited sentence left is a
not-found. So is a draft that names an identifier of the question which no source names: its facts
come from a source about something else (a code one character away).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from enterprise_rag.answer.checks.citations import split_sentences
from enterprise_rag.answer.checks.draft import Draft, Quote, Sentence
from enterprise_rag.answer.checks.numbers import numbers
from enterprise_rag.text import contact_points, identifiers, terms

MIN_SHARE = 0.5
REATTRIBUTE_SHARE = 0.8
MIN_TERMS = 3
_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"), "-")
_APOSTROPHES = dict.fromkeys(map(ord, "\u2018\u2019\u201a\u201b\u2032`"), "'")
_WORD = re.compile(r"[^\W_]+(?:['.,:/-][^\W_]+)*")
_REPORTING_FRAME = re.compile(
    r"^\s*(?:according\s+to\s+(?:the\s+)?(?:sources?|documents?)\s*,\s*"
    r"|(?:the\s+)?(?:sources?|documents?)\s+(?:state|say|mention|note|explain)s?\s+(?:that\s+)?)",
    re.IGNORECASE,
)


def word_sequence(text: str) -> str:
    """``text`` as its words, lower case, single-spaced and padded: how evidence is compared to a source."""
    text = unicodedata.normalize("NFKC", text).translate(_DASHES).translate(_APOSTROPHES).casefold()
    return f" {' '.join(_WORD.findall(text))} "


@dataclass(frozen=True)
class Problem:
    """A sentence that failed verification, and why."""

    sentence: Sentence
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Verification:
    kept: Draft  # the sentences that passed, each with its evidence
    problems: tuple[Problem, ...]
    attributed: int  # uncited sentences given the source they were copied from
    relabelled: int  # citations moved to the source that holds the sentence
    echoes: int = 0  # uncited questions and restatements of the question, left out
    unnamed: tuple[str, ...] = ()  # identifiers of the question that the draft uses and no source names

    def feedback(self) -> str:
        """Lines for the revision prompt (empty when every sentence passed)."""
        return "\n".join(f'- "{p.sentence.text[:160]}": {"; ".join(p.reasons)}.' for p in self.problems)

    def to_trace(self) -> dict[str, object]:
        return {
            "sentences": len(self.kept.sentences) + len(self.problems), "kept": len(self.kept.sentences),
            "attributed": self.attributed, "relabelled": self.relabelled, "echoes": self.echoes,
            "unnamed": list(self.unnamed),
            "problems": [(p.sentence.text, list(p.reasons)) for p in self.problems],
        }  # fmt: skip


def _share(words: set[str], source: str) -> float:
    return len(words & set(terms(source))) / len(words) if words else 0.0


def _evidence(words: set[str], source: str, limit: int = 300) -> str:
    """The sentence of ``source`` sharing the most content words with the answer sentence."""
    best = max(split_sentences(source) or [source], key=lambda s: len(words & set(terms(s))))
    return " ".join(best.split())[:limit]


def _holder(
    words: set[str],
    sources: Mapping[str, str],
    share: float = REATTRIBUTE_SHARE,
    holds: Callable[[str], bool] | None = None,
) -> str | None:
    """The source holding at least ``share`` of ``words`` (and passing ``holds``, if given), the best one if
    several do."""
    scores = {label: _share(words, text) for label, text in sources.items()}
    ranked = sorted(scores, key=lambda k: -scores[k])
    return next((k for k in ranked if scores[k] >= share and (holds is None or holds(k))), None)


def _compact(text: str) -> tuple[str, set[int]]:
    """The letters and digits of ``text`` run together, and the offsets where its words start."""
    compact, starts = "", set()
    for word in word_sequence(text).split():
        starts.add(len(compact))
        compact += re.sub(r"[\W_]", "", word)
    return compact, starts


def _named_in(identifier: str, texts: list[str]) -> bool:
    wanted = _compact(identifier)[0]
    for text in texts:
        compact, starts = _compact(text)
        at = compact.find(wanted)
        while at >= 0:
            if at in starts:
                return True
            at = compact.find(wanted, at + 1)
    return False


def _unknown_values(sentence: str, cited: list[str], question: str) -> list[str]:
    """The numbers of ``sentence`` found in none of the ``cited`` texts nor the question, and its identifiers
    found in none of the ``cited`` texts. An identifier names what a fact is about: a source that does not
    name it is about something else, even when the question names it."""
    codes = identifiers(sentence)
    plain = sentence
    for code in codes:  # a code's digits are checked as part of the code, not again as a number
        plain = re.sub(re.escape(code), " ", plain, flags=re.IGNORECASE)
    known = numbers(question).union(*(numbers(t) for t in cited))
    addresses = contact_points(sentence)
    for address in addresses:  # an address's digits and codes are checked as part of it
        plain = re.sub(re.escape(address), " ", plain, flags=re.IGNORECASE)
        codes = {c for c in codes if c not in address}
    given = set().union(*(contact_points(t) for t in cited))
    unknown = sorted(numbers(plain) - known) + sorted(i for i in codes if not _named_in(i, cited))
    return unknown + sorted(addresses - given)


def states_nothing(text: str) -> bool:
    """A line introducing a list, or too few content words and no number to state a fact."""
    return text.rstrip().endswith(":") or (len(set(terms(text))) < MIN_TERMS and not re.search(r"\d", text))


def _verified(
    sentence: Sentence, words: set[str], labels: list[str], sources: Mapping[str, str], question: str
) -> tuple[Sentence | None, tuple[str, ...], int]:
    """``sentence`` with its evidence from the ``labels`` that hold it, or the reasons it fails; and how many
    citations were moved to the source that holds it."""
    reasons: list[str] = []
    verified: list[str] = []
    relabelled = 0
    for label in labels:
        if label not in sources:
            reasons.append(f"[{label}] is not one of the numbered sources")
        elif len(words) < MIN_TERMS or _share(words, sources[label]) >= MIN_SHARE:
            verified.append(label)
        elif (holder := _holder(words, sources)) is not None:
            verified.append(holder)
            relabelled += 1
        else:
            reasons.append(f"it is not what [{label}] says; state only what the source says")
    verified = list(dict.fromkeys(verified))
    if verified:
        missing = _unknown_values(sentence.text, [sources[label] for label in verified], question)
        if missing:  # cited the wrong one of several sources: move to the one holding it with every value

            def has_values(label: str) -> bool:
                return not _unknown_values(sentence.text, [sources[label]], question)

            other = _holder(words, sources, MIN_SHARE, has_values)
            if other is not None:
                verified, missing, relabelled = [other], [], relabelled + 1
        if not missing:
            quotes = tuple(Quote(label, _evidence(words, sources[label])) for label in verified)
            return Sentence(sentence.text, quotes), (), relabelled
        reasons = [f"{', '.join(missing)} is in none of its cited sources"]
    return None, tuple(reasons), relabelled


def _neighbour_labels(sentences: tuple[Sentence, ...], i: int, resolved: list[list[str]]) -> list[list[str]]:
    """The labels of the nearest cited sentence after sentence ``i``, then of the nearest verified one before
    it (``resolved``: the verified labels of sentences ``0..i-1``): a citation written once at the end (or
    start) of a run of sentences is meant for all of them."""
    after = next((s.labels for s in sentences[i + 1 :] if s.labels), [])
    before = next((labels for labels in reversed(resolved) if labels), [])
    return [labels for labels in (after, before) if labels]


def verify_draft(draft: Draft, sources: Mapping[str, str], question: str) -> Verification:
    """Check every sentence of ``draft`` against ``sources`` (label -> text) and the ``question``."""
    kept: list[Sentence] = []
    problems: list[Problem] = []
    attributed = relabelled = echoes = 0
    resolved: list[list[str]] = []  # per sentence so far, the labels it was verified against
    for i, sentence in enumerate(draft.sentences):
        words = set(terms(_REPORTING_FRAME.sub("", sentence.text)))
        labels = [q.label for q in sentence.quotes]
        if labels:
            checked, reasons, moved = _verified(sentence, words, labels, sources, question)
            relabelled += moved
        elif sentence.text.rstrip().endswith("?"):
            echoes += 1  # a question states nothing
            resolved.append([])
            continue
        elif states_nothing(sentence.text):
            kept.append(sentence)
            resolved.append([])
            continue
        else:
            holder = _holder(words, sources)
            candidates = [[holder]] if holder is not None else _neighbour_labels(draft.sentences, i, resolved)
            checked, reasons = None, ("it cites no source; add the label of the source it comes from",)
            for candidate in candidates:
                checked, _, moved = _verified(sentence, words, candidate, sources, question)
                if checked is not None:
                    attributed, relabelled = attributed + 1, relabelled + moved
                    break
            if checked is None and _share(words, question) >= REATTRIBUTE_SHARE:
                echoes += 1  # the question restated: no source holds it, and it tells the user nothing new
                resolved.append([])
                continue
        resolved.append(checked.labels if checked is not None else [])
        if checked is not None:
            kept.append(checked)
        else:
            problems.append(Problem(sentence, reasons))
    # The draft names what the question asks about, and no source does: the sources are about something else
    # (a code one character away), so none of its sentences answers the question.
    unnamed = tuple(sorted(
        code for code in identifiers(question) & set().union(*(identifiers(s.text) for s in draft.sentences))
        if not _named_in(code, list(sources.values()))
    ))  # fmt: skip
    if unnamed or not any(s.quotes for s in kept):
        kept = []  # connecting words alone are no answer
    return Verification(draft.keep(kept), tuple(problems), attributed, relabelled, echoes, unnamed)
