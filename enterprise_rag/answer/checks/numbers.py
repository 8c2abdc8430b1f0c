"""Numbers in an answer that no source (nor the question) contains: the usual invention of a small model.

A number is a run of digits not inside a word (``CET1`` is a name); ``1,000``, ``1.5``, ``$25`` and
``30-day`` give ``1000``, ``1.5``, ``25`` and ``30``. Citation labels and list ordinals (``1.`` at the start
of a line) are not numbers of the answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from enterprise_rag.answer.checks.citations import strip_citations

_NUMBER = re.compile(r"(?<![^\W_])\d+(?:[.,]\d+)*")  # not the digits inside a word like "CET1"
_ORDINAL = re.compile(r"^\s*\d{1,3}[.)]\s", re.M)


def numbers(text: str) -> set[str]:
    found = set()
    for match in _NUMBER.finditer(text):
        value = match.group().replace(",", "")
        found.add(value.rstrip("0").rstrip(".") if "." in value else value.lstrip("0") or "0")
    return found


def invented_numbers(answer: str, texts: Iterable[str]) -> list[str]:
    """Numbers of ``answer`` found in none of ``texts`` (pass the sources and the question), sorted."""
    known: set[str] = set()
    for text in texts:
        known |= numbers(text)
    return sorted(numbers(_ORDINAL.sub("", strip_citations(answer))) - known)
