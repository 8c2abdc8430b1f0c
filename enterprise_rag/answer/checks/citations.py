"""Citation markup in answer text: ``[S1]``-style labels, and the sentences of an answer.

Answers are rendered from structured drafts (:mod:`enterprise_rag.answer.checks.draft`), but a
model's sentence text, a conversation's earlier answer or a caller's string can still carry labels,
so labels are read in every common form (``[S1]``, ``[s01]``, ``[S1, S2]``, ``[S1-S3]``, ``[Source: S1]``,
``(S1)``) and
sentences are split the way an answer is written: lines and list items never merge, and
abbreviations, decimals and codes never split a sentence.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from enterprise_rag.text import LIST_ITEM, split_line

_LABEL = r"[Ss]\s*\d+"
_ITEM_SEP = r"\s*(?:[,;]|[-\u2010-\u2015]|\bto\b)?\s*"
_BODY = rf"(?i:sources?\s*:?\s*)?{_LABEL}(?:{_ITEM_SEP}[Ss]?\s*\d+)*\s*"
CITATION = re.compile(rf"\[\s*{_BODY}\]|\(\s*{_BODY}\)")
_PART = re.compile(r"([Ss])?\s*(\d+)|([-\u2010-\u2015]|\bto\b)")
_MAX_RANGE = 50  # a typo like [S1-S999] must not explode into a thousand labels

_QUOTES = str.maketrans(
    {c: '"' for c in "\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb"}
    | {c: "'" for c in "\u2018\u2019\u201a\u201b\u2032"}
    | {c: "-" for c in "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"}
    | {"\u00ad": None}
)
_TRAILING_CITES = re.compile(rf"(?:\s*{CITATION.pattern})+[.!?]?")
_HEADING = re.compile(r"^(?:#{1,6}\s+.*|\*\*[^*]+\*\*:?|__[^_]+__:?)$")


def normalise(text: str) -> str:
    """Compare text the way a reader would: NFKC, casefold, straight quotes, '-' dashes, single spaces."""
    return " ".join(unicodedata.normalize("NFKC", text).translate(_QUOTES).casefold().split())


def _expand(citation: str) -> list[str]:
    """Labels of one bracket, ranges expanded: '[S1-S3]' -> S1, S2, S3."""
    out: list[int] = []
    pending_range = False
    for m in _PART.finditer(citation):
        if m.group(3):
            pending_range = bool(out)
            continue
        n = int(m.group(2))
        if pending_range and out and 0 < n - out[-1] <= _MAX_RANGE:
            out.extend(range(out[-1] + 1, n + 1))
        else:
            out.append(n)
        pending_range = False
    return [f"S{n}" for n in out]


def _unique(labels: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(labels))


def cited_labels(text: str) -> list[str]:
    """Distinct labels ('S1', ...) in order of first use."""
    return _unique(label for m in CITATION.finditer(text) for label in _expand(m.group()))


def strip_citations(text: str) -> str:
    """Remove citation brackets and tidy the spaces they leave before punctuation."""
    text = CITATION.sub("", text)
    text = re.sub(r"[ \t]+([.,;:!?)\]])", r"\1", text)
    text = re.sub(r"([(\[])[ \t]+", r"\1", text)
    return "\n".join(re.sub(r"[ \t]{2,}", " ", line).strip() for line in text.split("\n"))


def split_sentences(text: str) -> list[str]:
    """Answer-aware units: a heading, or the sentences of a line (list markers and quote marks dropped);
    lines and list items never merge, fenced code is skipped."""
    units: list[str] = []
    in_code = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("```", "~~~")):
            in_code = not in_code
            continue
        if in_code or not line:
            continue
        line = re.sub(r"^(?:>\s*)+", "", line)
        if _HEADING.match(line):
            units.append(line.lstrip("#").strip())
        else:
            units.extend(split_line(LIST_ITEM.sub("", line, count=1), _TRAILING_CITES))
    return units
