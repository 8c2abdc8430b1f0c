"""The parts of a many-part question that an answer leaves out, found in code.

The local generator answers the first part of "Which band is that, and what should I
do next?" and stops there, and the model's usefulness check calls that answer useful.
A question is cut into its parts (its question sentences, and the clauses joined by
"and" before a question word). A part is left out when the answer shares none of its
content words (compared on a crude stem: "rated" / "rating") while the sources hold one
of them, so that there is something to add. A part asking for an amount or a time ("how
long", "when") counts as answered by any number. Words alone are a weak test ("What
does it mean?" is answered by "indicates"), so parts are only reported when the answer
also has fewer sentences than the question has parts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from enterprise_rag.answer.checks.citations import split_sentences
from enterprise_rag.text import terms

_QUESTION_SENTENCE = re.compile(r"[^.?!]*\?")
_AND_QUESTION_WORD = re.compile(r",?\s+and\s+(?=(?:what|which|how|when|where|who|whom|whose|why)\b)", re.IGNORECASE)
_ASKS_QUANTITY = re.compile(r"^(?:how\s+(?:long|much|many|often|soon|quickly|far|old)|when)\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|twelve|twenty|thirty|hundred)\b", re.I)
# Words a question is framed with, beyond the stop words :func:`terms` already drops: no part is about them.
_SCAFFOLDING = frozenset(
    {
        "should", "could", "would", "must", "may", "might", "shall", "have", "has", "had", "need", "me",
        "your", "you", "they", "them", "their", "there", "its", "get", "did", "done", "any",
        "some", "each", "one", "about", "if", "not", "all", "also", "then", "been", "am", "were",
    }
)  # fmt: skip
_SUFFIXES = ("ings", "ing", "ions", "ion", "ed", "es", "e", "s")


def question_parts(question: str) -> list[str]:
    """The questions inside ``question``, without their question marks (context sentences left out)."""
    sentences = _QUESTION_SENTENCE.findall(question) or [question]
    return [p.strip(" ,?") for s in sentences for p in _AND_QUESTION_WORD.split(s) if p.strip(" ,?")]


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)][:5]
    return word[:5]


def _stems(text: str) -> set[str]:
    return {_stem(w) for w in terms(text) if w not in _SCAFFOLDING}


def unanswered_parts(question: str, answer: str, sources: Iterable[str]) -> list[str]:
    """The parts of a question of two or more parts that ``answer`` does not touch but ``sources`` might."""
    parts = question_parts(question)
    if len(parts) < 2 or len(split_sentences(answer)) >= len(parts):
        return []  # a one-part question, or room for every part: the usefulness check's call
    said, held = _stems(answer), _stems(" ".join(sources))
    left_out = []
    for part in parts:
        wanted = _stems(part)
        if wanted & said or (_ASKS_QUANTITY.match(part) and _NUMBER.search(answer)):
            continue
        if wanted & held:
            left_out.append(f"{part}?")
    return left_out
