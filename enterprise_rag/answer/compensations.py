"""Aids for a small local model, each named and switched by one setting (``workflow.compensations``).

An aid is code that stands in for a judgement the model makes badly. Each one is kept only where the
development figures per failure type show that it helps overall and hurts no type (see
``docs/answers.md``); the default list of the setting names those switched on.

``question_codes``: a question that names an identifier (a token mixing letters and digits, such as a
product, error or station code) is about that one thing. When no source the user may read names it,
the sources are about something else, however close (a code one character away), and the question is
not answered from them: the small model would otherwise answer it with the neighbour's facts, and
every check of those facts against their own spans would pass. An identifier made of letters and a
number is also named by a word beginning with those letters followed by the number ("P1" by
"Priority 1").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from enterprise_rag.answer.checks.verification import named_in
from enterprise_rag.text import identifiers

QUESTION_CODES = "question_codes"
AVAILABLE = (QUESTION_CODES,)
_LETTERS_NUMBER = re.compile(r"^([a-z]+)[-\s]?(\d+)$")


def _abbreviated_in(code: str, texts: Sequence[str]) -> bool:
    """Whether ``code`` (letters then a number, like ``p1``) is written out in one of ``texts`` as a word
    starting with those letters followed by the number (``Priority 1``)."""
    match = _LETTERS_NUMBER.match(code)
    if match is None:
        return False
    letters, number = match.groups()
    written_out = re.compile(rf"\b{re.escape(letters)}[a-z]*[\s-]+0*{number}\b", re.IGNORECASE)
    return any(written_out.search(text) for text in texts)


def unnamed_question_codes(question: str, texts: Sequence[str]) -> list[str]:
    """The identifiers of ``question`` that none of ``texts`` names, sorted."""
    return sorted(
        code for code in identifiers(question) if not named_in(code, texts) and not _abbreviated_in(code, texts)
    )
