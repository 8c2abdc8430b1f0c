"""What one answer run knows so far: candidates, grades, sources, draft and loop counters.

It is the typed state of the run's workflow ``Context``, so concurrent runs of
the one workflow instance share nothing; the steps edit it and
:class:`~enterprise_rag.answer.outcome.Outcome` is made from it.
"""

from __future__ import annotations

from llama_index.core.schema import NodeWithScore
from pydantic import BaseModel, ConfigDict, Field

from enterprise_rag.answer.checks.decision import DecisionResult
from enterprise_rag.answer.checks.draft import Draft
from enterprise_rag.answer.checks.grading import Grade
from enterprise_rag.answer.checks.support import NOT_APPLICABLE, SupportVerdict
from enterprise_rag.answer.events import Ask
from enterprise_rag.schema.sources import Source


class RunState(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    # The start event holds live collaborators (LLM caller, trace recorder): excluded, so edits share it.
    ask: Ask | None = Field(default=None, exclude=True)
    query: str = ""
    queries: list[str] = Field(default_factory=list)
    candidates: dict[str, NodeWithScore] = Field(default_factory=dict)
    grades: dict[str, Grade] = Field(default_factory=dict)
    decision: DecisionResult | None = None
    sources: list[Source] = Field(default_factory=list)
    answer: str = ""
    draft: Draft | None = None  # the current draft; after the checks, only what they kept
    kept_before: Draft | None = None  # the verified sentences of a draft sent back for a citation revision
    rewrites: int = 0
    citation_revisions: int = 0
    hallucination_retries: int = 0
    usefulness_retries: int = 0
    web_used: bool = False
    verdict: SupportVerdict = NOT_APPLICABLE
    flagged: bool = False
    retrieval_used: bool = True
    basis: frozenset[str] = frozenset()  # ids of the sources of the current draft
    not_found_from: list[frozenset[str]] = Field(default_factory=list)  # source sets with no answer in them

    @property
    def run(self) -> Ask:
        """The event this run started with: question, history, principal, LLM caller, trace recorder."""
        if self.ask is None:
            raise RuntimeError("the run has not started: no Ask event in its state")
        return self.ask

    @property
    def answered(self) -> str:
        """The question generation answers: a follow-up's standalone form, else the question as asked."""
        return self.query if self.run.history else self.run.question
