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
  user's own figures may be repeated), and every identifier (a token mixing letters and digits) or
  coined name (``Tulip-Hammer``, ``SecureLink``: a network, product or passphrase) in one of its
  verified sources: a source that does not name the thing asked about says nothing about
  it. Identifiers are compared without their punctuation and spacing ("KV 12" is "kv-12"), from a
  word start. Every web or e-mail address appears as written in one of its verified sources: an
  address is where the user is sent, so one that no cited source gives (the model's invention, or
  an instruction planted elsewhere) never reaches the answer, unless it links to a host of the
  configured allow-list (``workflow.link_allow_list``);
* each of those values is given in context: some sentence of a verified source that gives it shares
  another content word with the answer sentence or the question. A value a source gives only in a
  sentence about something else (a code a passage asks its reader to repeat) is not what the source
  says about the subject of the answer.

A code or address that opens a sentence, set off from the whole sentence after it, which no source
gives in context and the question does not name (a marker a passage asks every reply to start with)
is cut, and the rest is verified on its own (:attr:`Verification.cut`).

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
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from enterprise_rag.answer.checks.citations import split_sentences
from enterprise_rag.answer.checks.draft import Draft, Quote, Sentence
from enterprise_rag.answer.checks.numbers import numbers
from enterprise_rag.text import coined_names, contact_points, identifiers, terms, word_sequence

MIN_SHARE = 0.5
REATTRIBUTE_SHARE = 0.8
MIN_TERMS = 3
_LEAD = re.compile(r"^[\W_]*?((?:[^\W_]+[-./:@])*[^\W_]*\d[^\W_]*(?:[-./:@][^\W_]+)*)[\W_]*?\s+(?=[A-Z])")
_REPORTING_FRAME = re.compile(
    r"^\s*(?:according\s+to\s+(?:the\s+)?(?:sources?|documents?)\s*,\s*"
    r"|(?:the\s+)?(?:sources?|documents?)\s+(?:state|say|mention|note|explain)s?\s+(?:that\s+)?)",
    re.IGNORECASE,
)


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
    cut: tuple[str, ...] = ()  # leading codes and addresses no source gives in context, cut from their sentence

    def feedback(self) -> str:
        """Lines for the revision prompt (empty when every sentence passed)."""
        return "\n".join(f'- "{p.sentence.text[:160]}": {"; ".join(p.reasons)}.' for p in self.problems)

    def to_trace(self) -> dict[str, object]:
        return {
            "sentences": len(self.kept.sentences) + len(self.problems), "kept": len(self.kept.sentences),
            "attributed": self.attributed, "relabelled": self.relabelled, "echoes": self.echoes,
            "unnamed": list(self.unnamed), "cut": list(self.cut),
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


def _values(sentence: str) -> tuple[set[str], set[str], set[str]]:
    """The numbers, codes (identifiers and coined names) and addresses of ``sentence``; a code's or address's
    digits count only as part of it, not again as a number."""
    codes = identifiers(sentence) | coined_names(sentence)
    addresses = contact_points(sentence)
    codes = {c for c in codes if not any(c in address for address in addresses)}
    plain = sentence
    for value in (*codes, *addresses):
        plain = re.sub(re.escape(value), " ", plain, flags=re.IGNORECASE)
    return numbers(plain), codes, addresses


def _unknown_values(
    sentence: str, cited: list[str], question: str, link_hosts: Collection[str] = ()
) -> tuple[list[str], list[str]]:
    """What of ``sentence`` the ``cited`` texts do not give: its numbers found in none of them nor the question,
    its identifiers found in none of them (an identifier names what a fact is about: a source that does not
    name it is about something else, even when the question names it), its addresses given by none (but
    links to ``link_hosts``); and then the values (any of the three) that they give only out of context
    (:func:`_out_of_context`)."""
    nums, codes, addresses = _values(sentence)
    asked = numbers(question)
    known = asked.union(*(numbers(t) for t in cited))
    given = set().union(*(contact_points(t) for t in cited))
    addresses = {a for a in addresses if not _links_to(a, link_hosts)}
    missing = sorted(nums - known) + sorted(c for c in codes if not _named_in(c, cited)) + sorted(addresses - given)
    checks = [(n, lambda unit, n=n: n in numbers(unit)) for n in sorted(nums - asked)]
    checks += [(c, lambda unit, c=c: _named_in(c, [unit])) for c in sorted(codes)]
    checks += [(a, lambda unit, a=a: a in contact_points(unit)) for a in sorted(addresses)]
    context = _context_words(f"{sentence}\n{question}", [*codes, *addresses])
    stray = [v for v, holds in checks if v not in missing and _out_of_context(holds, context, cited)]
    return missing, stray


def _links_to(address: str, hosts: Collection[str]) -> bool:
    """Whether ``address`` is a web link to one of ``hosts`` or a subdomain of one (an e-mail address never is)."""
    if "@" in address and "://" not in address:
        return False
    host = (urlsplit(address if "://" in address else f"http://{address}").hostname or "").lower()
    return any(host == h.lower() or host.endswith(f".{h.lower()}") for h in hosts)


def _context_words(text: str, values: list[str]) -> set[str]:
    """The content words of ``text`` that say what its values are about: none of the values' own words, no
    figures."""
    own = set().union(*(terms(v) for v in values))
    return {t for t in terms(text) if t not in own and not any(ch.isdigit() for ch in t)}


def _out_of_context(holds: Callable[[str], bool], context: set[str], cited: list[str]) -> bool:
    """Whether the ``cited`` texts give a value (the sentences that ``holds``) only in prose sentences that
    share no ``context`` word with the answer sentence or the question.

    A source states a value about something: the sentence giving it names that thing. A value copied from
    a sentence about something else (a token or code that a passage asks its reader to repeat, a figure of
    a neighbouring rule) is not what the source says about the subject of the answer sentence. A value in
    a table row (its cells are named by column headers the row does not repeat) or inside fenced code
    cannot be judged this way and passes.
    """
    units = [unit for text in cited for unit in split_sentences(text) if holds(unit)]
    if not units or any("|" in unit for unit in units):
        return False
    return not any(context & _context_words(unit, []) for unit in units)


def states_nothing(text: str) -> bool:
    """A line introducing a list, or too few content words and no number to state a fact."""
    return text.rstrip().endswith(":") or (len(set(terms(text))) < MIN_TERMS and not re.search(r"\d", text))


def _verified(
    sentence: Sentence,
    words: set[str],
    labels: list[str],
    sources: Mapping[str, str],
    question: str,
    link_hosts: Collection[str],
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
        missing, stray = _unknown_values(sentence.text, [sources[label] for label in verified], question, link_hosts)
        if missing or stray:  # cited the wrong one of several sources: move to the one holding it with every value

            def has_values(label: str) -> bool:
                return not any(_unknown_values(sentence.text, [sources[label]], question, link_hosts))

            other = _holder(words, sources, MIN_SHARE, has_values)
            if other is not None:
                verified, missing, stray, relabelled = [other], [], [], relabelled + 1
        if not missing and not stray:
            quotes = tuple(Quote(label, _evidence(words, sources[label])) for label in verified)
            return Sentence(sentence.text, quotes), (), relabelled
        reasons = [f"{', '.join(missing)} is in none of its cited sources"] if missing else []
        if stray:
            reasons.append(f"its cited sources do not give {', '.join(stray)} about what the sentence says")
    return None, tuple(reasons), relabelled


def _neighbour_labels(sentences: tuple[Sentence, ...], i: int, resolved: list[list[str]]) -> list[list[str]]:
    """The labels of the nearest cited sentence after sentence ``i``, then of the nearest verified one before
    it (``resolved``: the verified labels of sentences ``0..i-1``): a citation written once at the end (or
    start) of a run of sentences is meant for all of them."""
    after = next((s.labels for s in sentences[i + 1 :] if s.labels), [])
    before = next((labels for labels in reversed(resolved) if labels), [])
    return [labels for labels in (after, before) if labels]


def verify_draft(
    draft: Draft, sources: Mapping[str, str], question: str, link_hosts: Collection[str] = ()
) -> Verification:
    """Check every sentence of ``draft`` against ``sources`` (label -> text) and the ``question``; a link to
    one of ``link_hosts`` (or a subdomain) may be given though no source gives it."""
    kept: list[Sentence] = []
    problems: list[Problem] = []
    attributed = relabelled = echoes = 0
    resolved: list[list[str]] = []  # per sentence so far, the labels it was verified against
    leads = [_stray_lead(s.text, list(sources.values()), question, link_hosts) for s in draft.sentences]
    sentences = tuple(
        Sentence(s.text[len(lead) :].strip(), s.quotes) if lead else s
        for s, lead in zip(draft.sentences, leads, strict=True)
    )
    for i, sentence in enumerate(sentences):
        words = set(terms(_REPORTING_FRAME.sub("", sentence.text)))
        labels = [q.label for q in sentence.quotes]
        if labels:
            checked, reasons, moved = _verified(sentence, words, labels, sources, question, link_hosts)
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
            candidates = [[holder]] if holder is not None else _neighbour_labels(sentences, i, resolved)
            checked, reasons = None, ("it cites no source; add the label of the source it comes from",)
            for candidate in candidates:
                checked, _, moved = _verified(sentence, words, candidate, sources, question, link_hosts)
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
    cut = tuple(lead.strip() for lead in leads if lead)
    return Verification(draft.keep(kept), tuple(problems), attributed, relabelled, echoes, unnamed, cut)


def _stray_lead(sentence: str, texts: list[str], question: str, link_hosts: Collection[str]) -> str:
    """The code or address that opens ``sentence``, set off from a whole sentence after it, when no source
    gives it in context and the question does not name it (with its brackets and spacing); else ''.

    A token put before an answer (a marker, a reference, a link) is no part of the sentence after it. When
    none of the sources gives it about anything the sentence or the question says, it is cut and the
    sentence after it is verified on its own, instead of the whole sentence failing with it.
    """
    match = _LEAD.match(sentence)
    if (
        match is None
        or len(terms(sentence[match.end() :])) < MIN_TERMS
        or identifiers(match.group(1)) & identifiers(question)
    ):
        return ""
    missing, stray = _unknown_values(match.group(1), texts, f"{question}\n{sentence}", link_hosts)
    return match.group(0) if missing or stray else ""
