"""The corrective decision from relevance grades (pure logic, thresholds from config)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from enterprise_rag.answer.checks.grading import Grade

Decision = Literal["proceed", "augment", "fallback"]


@dataclass(frozen=True)
class DecisionResult:
    decision: Decision
    ambiguous: bool  # worth a query rewrite and another retrieval before giving up or going to the web
    relevance: float  # 0..1: how well the corpus answers, for the evaluation payload
    reason: str


def decide(grades: Sequence[Grade], *, min_yes: int = 1) -> DecisionResult:
    """proceed: enough passages answer; augment: only partial / ungraded ones; fallback: none help."""
    yes = sum(1 for g in grades if g.grade == "yes")
    partial = sum(1 for g in grades if g.grade == "partial")
    ungraded = sum(1 for g in grades if g.grade == "ungraded")
    scored = [1.0 if g.grade == "yes" else 0.5 if g.grade in ("partial", "ungraded") else 0.0 for g in grades]
    relevance = round(max(scored, default=0.0) * 0.7 + (sum(scored) / len(scored) if scored else 0.0) * 0.3, 3)
    if yes >= min_yes:
        return DecisionResult("proceed", False, relevance, f"{yes} passage(s) answer the question")
    if partial or ungraded:
        return DecisionResult("augment", True, relevance, f"no passage answers; {partial} partial, {ungraded} ungraded")
    return DecisionResult("fallback", True, relevance, "no passage is relevant")
