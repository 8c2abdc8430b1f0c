"""The review of a draft answer in code, before any model checks it.

Citations are repaired first (a sentence copied from a source gets its label, a
mis-cited copy is relabelled), then checked: labels exist, factual sentences are
cited, quotes are found, and every cited sentence is grounded in its sources; and
no part of a many-part question is left out while the sources speak to it. A
second opinion (the generator told the answer is there, with no not-found exit)
is held to more: its uncited sentences are dropped rather than revised, a sentence
of it saying the sources lack the answer makes it a not-found ("[S1] Northwind
Finance is a company that operates in the financial industry. The sources do not
provide any information about the current CEO."), a number it states must be in
the sources or the question, and it is never revised, only kept or discarded
(:attr:`DraftReview.fit_as_second_opinion`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from enterprise_rag.answer.checks.attribution import attribute_citations, reattribute_citations
from enterprise_rag.answer.checks.citations import (
    CitationReport,
    check_citations,
    drop_uncited,
    says_nothing,
    states_not_found,
)
from enterprise_rag.answer.checks.coverage import unanswered_parts
from enterprise_rag.answer.checks.grounding import grounding_feedback, ungrounded_sentences
from enterprise_rag.answer.checks.numbers import invented_numbers


@dataclass(frozen=True)
class DraftReview:
    answer: str  # the draft with its citations repaired (and, for a second opinion, uncited sentences dropped)
    citations: CitationReport
    attributed: int  # uncited sentences given the label of the source they were copied from
    relabelled: int  # cited sentences moved to the source that does ground them
    invented_numbers: list[str]
    ungrounded: list[str]
    unanswered: list[str]  # parts of the question left out (never asked of a second opinion)
    admits_not_found: bool  # a second opinion with a "the sources do not say" sentence

    @property
    def needs_revision(self) -> bool:
        return not self.citations.ok or bool(self.ungrounded) or bool(self.unanswered)

    @property
    def fit_as_second_opinion(self) -> bool:
        return (
            not self.needs_revision
            and not self.invented_numbers
            and not self.admits_not_found
            and not says_nothing(self.answer)
        )

    def feedback(self) -> str:
        """Lines for the revision prompt."""
        left_out = [
            f"The answer does not address this part of the question: {part} Add what the sources say about it."
            for part in self.unanswered
        ]
        return "\n".join([self.citations.feedback(), grounding_feedback(self.ungrounded), *left_out]).strip()

    def to_trace(self) -> dict[str, object]:
        return {
            "ok": self.citations.ok, "attributed_in_code": self.attributed, "relabelled_in_code": self.relabelled,
            "invented_numbers": self.invented_numbers, "ungrounded": self.ungrounded, "unanswered": self.unanswered,
            "admits_not_found": self.admits_not_found,
            "issues": [(i.kind, i.detail) for i in self.citations.issues],
        }  # fmt: skip


def review_draft(
    answer: str, sources: Mapping[str, str], question: str, *, second_opinion: bool, rephrased: str = ""
) -> DraftReview:
    """Review ``answer`` to ``question`` against ``sources`` (label -> text). The words of the question and of
    its ``rephrased`` form (a follow-up as asked, or its rewrite) may be repeated without a source."""
    asked = f"{question}\n{rephrased}"
    answer, attributed = attribute_citations(answer, sources)
    answer, relabelled = reattribute_citations(answer, sources, asked)
    report = check_citations(answer, sources)
    admits_not_found = second_opinion and states_not_found(answer)
    if second_opinion and report.cited_labels:  # told the answer is there, the model pads: drop, not revise
        answer = drop_uncited(answer, report)
        report = check_citations(answer, sources)
    invented = invented_numbers(answer, [*sources.values(), asked]) if second_opinion else []
    unanswered = [] if second_opinion else unanswered_parts(question, answer, sources.values())
    ungrounded = ungrounded_sentences(answer, sources, asked)
    return DraftReview(answer, report, attributed, relabelled, invented, ungrounded, unanswered, admits_not_found)
