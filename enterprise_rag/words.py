"""Content words of a text: lower case, no stop words, plural ``-s`` folded.

Shared by the curated web search (BM25 terms) and the grounding check of answers.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
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
