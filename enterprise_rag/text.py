"""Content words of a text: lower case, no stop words, plural ``-s`` folded.

Shared by the curated web search (BM25 terms) and the grounding check of answers; and the
identifiers and acronyms a text names (E-4120, LD-7, VPN) and its heading lines, shared by relevance
grading and context refinement.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_TOKEN = re.compile(r"\w[\w.\-/]*\w|\w", re.UNICODE)
_HEADING = re.compile(r"^\s*#{1,6}\s")
_ACRONYM = re.compile(r"\b[A-Z]{2,6}\b")
_QUERY_WORD = re.compile(r"[\w][\w.\-']*[\w]|[\w]", re.UNICODE)
_MAX_QUERY_WORDS = 64
STOPWORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how", "i", "in",
        "is", "it", "of", "on", "or", "the", "this", "that", "to", "was", "what", "when", "where", "which",
        "who", "why", "will", "with",
    }
)  # fmt: skip


def terms(text: str) -> list[str]:
    """Lower-case word terms without stop words, plural ``-s`` folded (``policies`` stays ``policies``)."""
    out = []
    for word in _WORD.findall(text.lower()):
        if word in STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is", "ies")):
            word = word[:-1]
        out.append(word)
    return out


def identifiers(text: str) -> set[str]:
    """Tokens of ``text`` mixing letters and digits (e-4120, ld-7, iso27001), lower case: codes that
    embeddings barely tell from their neighbours (E-4102). Plain numbers and dates are not identifiers."""
    return {t for t in _TOKEN.findall(text.lower()) if any(c.isdigit() for c in t) and any(c.isalpha() for c in t)}


def acronyms(text: str) -> set[str]:
    """Upper-case words of two to six letters (VPN, KYC, AML), lower case: the names of the systems and
    policies whole documents are about, which a heading uses as it is and a question repeats."""
    return {t.lower() for t in _ACRONYM.findall(text)}


def names(text: str) -> set[str]:
    """The codes and acronyms ``text`` names: what a heading and a question share when they are about one thing."""
    return identifiers(text) | acronyms(text)


def is_heading(line: str) -> bool:
    """A Markdown heading line, as chunk texts keep them (``## E-4120 - Daily limit``)."""
    return _HEADING.match(line) is not None


def query_words(question: str) -> list[str]:
    """Distinct words of a question, in order (bounded); the full-text half parses them into lexemes."""
    seen: dict[str, None] = {}
    for word in _QUERY_WORD.findall(question.lower()):
        seen.setdefault(word, None)
    return list(seen)[:_MAX_QUERY_WORDS]
