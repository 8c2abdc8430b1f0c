"""Checks on candidates and answers: relevance grading, the decision, citations, grounding, support."""

from __future__ import annotations

from enterprise_rag.answer.checks.citations import (
    CITATION,
    NOT_FOUND_PHRASES,
    CitationIssue,
    CitationReport,
    check_citations,
    cited_labels,
    drop_uncited,
    normalise,
    says_nothing,
    split_sentences,
    strip_citations,
)

__all__ = [
    "CITATION",
    "NOT_FOUND_PHRASES",
    "CitationIssue",
    "CitationReport",
    "check_citations",
    "cited_labels",
    "drop_uncited",
    "normalise",
    "says_nothing",
    "split_sentences",
    "strip_citations",
]
