"""The parts of a many-part question, found from its form alone.

A question is cut at its question marks and at ", and" / "and" before a question word ("What does
it mean and how do they fix it?" has two parts); sentences that ask nothing (context such as "My
reflection scored 21.") are left out. Evidence is chosen part by part, so a part the documents do
not answer is known by name and said to be missing instead of hiding the parts that are answered.
"""

from __future__ import annotations

import re

from enterprise_rag.text import terms

_QUESTION_SENTENCE = re.compile(r"[^.?!]*\?")
_AND_QUESTION_WORD = re.compile(r",?\s+and\s+(?=(?:what|which|how|when|where|who|whom|whose|why)\b)", re.IGNORECASE)
_MEASURE = re.compile(r"\bhow\s+\w+", re.IGNORECASE)  # "how long", "how often": the kind of answer asked for
# Pronouns and auxiliaries: words of a question that never name what it asks about.
_FUNCTION_WORDS = frozenset(
    {
        "i", "me", "you", "your", "he", "him", "his", "she", "her", "they", "them", "their", "us", "its", "there",
        "have", "has", "had", "be", "been", "being", "were", "did", "could", "should", "would", "must", "may",
        "might", "shall", "need", "get", "gets",
    }
)  # fmt: skip
MAX_PARTS = 3


def question_parts(question: str) -> list[str]:
    """The questions inside ``question``, without their question marks (context sentences left out); at most
    ``MAX_PARTS``, the rest joined to the last one."""
    sentences = _QUESTION_SENTENCE.findall(question) or [question]
    parts = [p.strip(" ,?") for s in sentences for p in _AND_QUESTION_WORD.split(s) if p.strip(" ,?")]
    if len(parts) > MAX_PARTS:
        parts = [*parts[: MAX_PARTS - 1], " and ".join(parts[MAX_PARTS - 1 :])]
    return parts or [question.strip()]


def answered_parts(parts: list[str], texts: list[str]) -> list[bool]:
    """For each part, whether ``texts`` (the verified sentences and the evidence they rest on) say something
    about it: they share a content word of the part that the other parts do not share (what the part asks
    about, not the subject all parts have in common). The word after "how" names the kind of answer asked
    for ("30 days" answers "how long"), not its subject; pronouns and auxiliaries name nothing. A part with
    no word of its own counts as answered."""
    if len(parts) < 2:
        return [True] * len(parts)
    said = set().union(*(terms(t) for t in texts)) if texts else set()
    words = [set(terms(_MEASURE.sub(" ", p))) - _FUNCTION_WORDS for p in parts]
    out = []
    for i, own in enumerate(words):
        distinct = own - set().union(*(w for j, w in enumerate(words) if j != i))
        out.append(not distinct or bool(distinct & said))
    return out
