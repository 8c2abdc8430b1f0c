"""Cited sentences made of words their sources do not contain: content from elsewhere.

A small model's support check can pass a generic sentence (advice from its own
knowledge) that cites a source about something else. In code, each cited sentence's content words
(:func:`enterprise_rag.text.terms`) are looked up in the sources it cites and in
the question; a sentence with less than ``min_share`` of them found is ungrounded.
Rewording keeps most words of what it restates, so the bar is deliberately low:
it catches invention, not paraphrase.
"""

from __future__ import annotations

from collections.abc import Mapping

from enterprise_rag.answer.checks.citations import cited_labels, split_sentences, strip_citations
from enterprise_rag.text import terms

_MIN_WORDS = 3  # shorter sentences ("Yes. [S1]") say too little to judge
MIN_SHARE = 0.5


def grounded_share(sentence: str, sources: Mapping[str, str], question: str) -> float | None:
    """Share of the sentence's content words found in the sources it cites or the question (None: nothing to judge)."""
    labels = [label for label in cited_labels(sentence) if label in sources]
    words = set(terms(strip_citations(sentence)))
    if not labels or len(words) < _MIN_WORDS:
        return None
    known = set(terms(question)).union(*(terms(sources[label]) for label in labels))
    return len(words & known) / len(words)


def ungrounded_sentences(
    answer: str, sources: Mapping[str, str], question: str, min_share: float = MIN_SHARE
) -> list[str]:
    """Cited sentences of ``answer`` with under ``min_share`` of their content words in their sources."""
    found = []
    for sentence in split_sentences(answer):
        share = grounded_share(sentence, sources, question)
        if share is not None and share < min_share:
            found.append(sentence)
    return found


def grounding_feedback(sentences: list[str]) -> str:
    """Revision-prompt lines for ungrounded sentences (empty when there are none)."""
    return "\n".join(
        f'- "{s[:100]}" is not what its cited source says; state only what the sources say.' for s in sentences
    )
