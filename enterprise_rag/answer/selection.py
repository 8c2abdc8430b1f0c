"""The evidence an answer is written from: the best-graded units, less paragraphs written to an AI model.

The units within ``margin`` of the best p(yes) are chosen (at most ``limit``; ungraded units, from a
grading outage, only when the model graded none), and the paragraphs of their spans are screened
(:class:`~enterprise_rag.answer.checks.addressee.AddresseeCheck`). When the screen sets a paragraph
aside, the choice is made again from the units left, the margin now measured from the best of them:
a planted line that outranks the document's own answer does not take that answer down with it. Each
round sets aside at least one more span, so the rounds end; the screen's cache makes a paragraph's
second look free.
"""

from __future__ import annotations

from dataclasses import dataclass

from enterprise_rag.answer.checks.addressee import AddresseeCheck
from enterprise_rag.answer.checks.candidates import Evidence
from enterprise_rag.answer.checks.grading import Grade
from enterprise_rag.schema.sources import Source
from enterprise_rag.schema.spans import Span


@dataclass(frozen=True)
class Selection:
    """The chosen units and their spans in text order, the spans set aside, every screened paragraph's score,
    and whether the best chosen unit is graded yes (strong evidence after the screen)."""

    chosen: list[Evidence]
    spans: list[Span]
    set_aside: list[Span]
    screened: list[tuple[str, float | None]]
    strong: bool


def select(
    evidence: list[tuple[Evidence, Grade]], sources: list[Source], screen: AddresseeCheck, *, margin: float, limit: int
) -> Selection:
    """Choose, screen, and choose again from what is left until the screen sets nothing more aside."""
    graded = sorted((p for p in evidence if p[1].grade in ("yes", "partial")), key=lambda p: -p[1].confidence)
    pool = graded or [p for p in evidence if p[1].grade == "ungraded"]
    aside: set[Span] = set()
    screened: dict[str, float | None] = {}
    while True:
        left = [p for p in pool if not set(p[0].spans) <= aside]
        if not left:
            return Selection([], [], sorted(aside, key=lambda sp: sp.number), list(screened.items()), False)
        floor = left[0][1].confidence - margin
        chosen = [p for p in left if p[1].confidence >= floor][:limit]
        spans = sorted({sp for u, _ in chosen for sp in u.spans} - aside, key=lambda sp: sp.number)
        more, scores = screen.screen(sources, spans)
        screened.update(scores)
        if not more:
            return Selection([u for u, _ in chosen], spans, sorted(aside, key=lambda sp: sp.number),
                             list(screened.items()), chosen[0][1].grade == "yes")  # fmt: skip
        aside |= more
