"""Verifying each answer sentence against the spans it rests on, in code, before the model judges it.

A sentence's evidence is the spans it names (verbatim pieces of its sources, chosen as the answer's
evidence). What a small model gets wrong when it rewrites a span is the value, so every value of the
sentence must be in its spans:

* every number (``1,000``, ``2.5``, ``$25``, a date's day and year) in its spans or in the question (the
  user's own figures may be repeated);
* a number's unit as its spans give it: ``22 L/s`` is not ``22 kVA`` (when both the sentence and its
  spans write a unit after the number, the units must be the same: first letters, or an abbreviation);
* every month name in its spans (``30 June`` is not ``30 September``);
* every identifier (a token mixing letters and digits) named in its spans, compared without punctuation
  and spacing from a word start (``KV 12`` is ``kv-12``), never excused by the question: a span that
  does not name the code a sentence is about is about something else;
* every web or e-mail address as its spans write it, unless it links to a host of the configured
  allow-list (``workflow.link_allow_list``).

A sentence that states nothing (a line introducing a list) needs no check. The meaning of a sentence
(a negation, who does what) is the judge's part: :mod:`enterprise_rag.answer.checks.support`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from enterprise_rag.answer.checks.draft import Sentence
from enterprise_rag.answer.checks.numbers import numbers
from enterprise_rag.text import STOPWORDS, contact_points, identifiers, terms, word_sequence

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")  # fmt: skip
_QUANTITY = re.compile(r"(?<![\w.,])(\d+(?:[.,]\d+)*)\s*(%|[A-Za-z][A-Za-z/]*)")
_UNIT_STEM = 3  # "week" / "weeks", "min" / "minutes": units compare on their first letters
_NOT_UNITS = frozenset({"or", "more", "less", "than", "per", "up", "each", "every", "after", "before", "within",
                        "between", "over", "under", "if", "but", "so", "nor"})  # fmt: skip


def states_nothing(text: str) -> bool:
    """A line introducing a list (ending in ``:``), or one without a content word, number, code or address."""
    if contact_points(text) or identifiers(text):
        return False
    return text.rstrip().endswith(":") or (not terms(text) and not re.search(r"\d", text))


def copies_its_spans(sentence: Sentence) -> bool:
    """Whether ``sentence`` is its spans word for word (case and punctuation aside): it states what they state
    by construction, so it needs no judge. Anything less or more is judged: a partial copy can drop a "not",
    and a copy with words added can carry a claim of its own."""
    stated = word_sequence(" ".join(x.text for x in sentence.spans))
    return bool(sentence.spans) and word_sequence(sentence.text) == stated


_ORDINAL = re.compile(r"^\s*(?:\d{1,3}[.)]|\(\d{1,3}\))\s")


def numbers_left_out(sentence: Sentence) -> list[str]:
    """The numbers its spans give (a list item's ordinal aside) that ``sentence`` leaves out, sorted: a
    rewrite of a span that loses its figures loses what a question usually asks for."""
    given = set().union(*(numbers(_ORDINAL.sub("", x.text)) for x in sentence.spans)) if sentence.spans else set()
    return sorted(given - numbers(sentence.text))


def _compact(text: str) -> tuple[str, set[int]]:
    """The letters and digits of ``text`` run together, and the offsets where its words start."""
    compact, starts = "", set()
    for word in word_sequence(text).split():
        starts.add(len(compact))
        compact += re.sub(r"[\W_]", "", word)
    return compact, starts


def named_in(identifier: str, texts: Sequence[str]) -> bool:
    """Whether one of ``texts`` names ``identifier`` (punctuation and spacing aside, from a word start)."""
    wanted = _compact(identifier)[0]
    for text in texts:
        compact, starts = _compact(text)
        at = compact.find(wanted)
        while at >= 0:
            if at in starts:
                return True
            at = compact.find(wanted, at + 1)
    return False


def _units(text: str) -> dict[str, set[str]]:
    """number -> the units written right after it in ``text`` (lower case), words that are no unit left out."""
    out: dict[str, set[str]] = {}
    for m in _QUANTITY.finditer(text):
        unit = m.group(2).lower()
        if unit in STOPWORDS or unit in _NOT_UNITS or unit in _MONTHS:
            continue
        for number in numbers(m.group(1)):
            out.setdefault(number, set()).add(unit)
    return out


def _same_unit(a: str, b: str) -> bool:
    """Whether two unit words name one unit: one's first letters start the other ("week", "weeks"; "min",
    "minutes"), or an abbreviation with a slash starts with the other's letter ("L/s", "litres per second")."""
    if a[:_UNIT_STEM].startswith(b[:_UNIT_STEM]) or b[:_UNIT_STEM].startswith(a[:_UNIT_STEM]):
        return True
    return a[0] == b[0] and ("/" in a or "/" in b)


def _months(text: str) -> set[str]:
    return {w for w in word_sequence(text).split() if w in _MONTHS}


def _links_to(address: str, hosts: Collection[str]) -> bool:
    """Whether ``address`` is a web link to one of ``hosts`` or a subdomain of one (an e-mail address never is)."""
    if "@" in address and "://" not in address:
        return False
    host = (urlsplit(address if "://" in address else f"http://{address}").hostname or "").lower()
    return any(host == h.lower() or host.endswith(f".{h.lower()}") for h in hosts)


@dataclass(frozen=True)
class Finding:
    """A sentence and what of it its spans do not give (empty: it passed)."""

    sentence: Sentence
    reasons: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.reasons


def check_values(sentence: Sentence, question: str, link_hosts: Collection[str] = ()) -> Finding:
    """Every number, unit, month, identifier and address of ``sentence`` checked against its spans."""
    evidence = [s.with_context() for s in sentence.spans]
    joined = "\n".join(evidence)
    text = sentence.text
    addresses = {a for a in contact_points(text) if not _links_to(a, link_hosts)}
    codes = {c for c in identifiers(text) if not any(c in a for a in contact_points(text))}
    plain = text
    for value in (*codes, *contact_points(text)):
        plain = re.sub(re.escape(value), " ", plain, flags=re.IGNORECASE)
    reasons = []
    missing_numbers = sorted(numbers(plain) - numbers(joined) - numbers(question))
    if missing_numbers:
        reasons.append(f"{', '.join(missing_numbers)} is not in its lines")
    given = _units(joined)
    wrong_units = sorted(
        f"{n} {u}" for n, units in _units(plain).items() for u in units
        if n in given and not any(_same_unit(u, g) for g in given[n])
    )  # fmt: skip
    if wrong_units:
        reasons.append(f"its lines do not give {', '.join(wrong_units)}")
    if months := sorted(_months(plain) - _months(joined)):
        reasons.append(f"{', '.join(months)} is not in its lines")
    if unnamed := sorted(c for c in codes if not named_in(c, evidence)):
        reasons.append(f"its lines do not name {', '.join(unnamed)}")
    if stray := sorted(addresses - contact_points(joined)):
        reasons.append(f"its lines do not give {', '.join(stray)}")
    return Finding(sentence, tuple(reasons))
