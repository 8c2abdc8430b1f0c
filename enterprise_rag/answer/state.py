"""What one answer run knows so far: candidates, grades, sources, chosen evidence, verified sentences, counters.

It is the typed state of the run's workflow ``Context``, so concurrent runs of
the one workflow instance share nothing; the steps edit it and
:class:`~enterprise_rag.answer.outcome.Outcome` is made from it.
"""

from __future__ import annotations

from llama_index.core.schema import NodeWithScore
from pydantic import BaseModel, ConfigDict, Field

from enterprise_rag.answer.checks.candidates import Evidence
from enterprise_rag.answer.checks.decision import DecisionResult
from enterprise_rag.answer.checks.draft import Draft, Sentence
from enterprise_rag.answer.checks.grading import Grade
from enterprise_rag.answer.checks.support import NOT_APPLICABLE, SupportVerdict, Usefulness
from enterprise_rag.answer.events import Ask
from enterprise_rag.schema.sources import Source
from enterprise_rag.schema.spans import Span


class RunState(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    # The start event holds live collaborators (LLM caller, trace recorder): excluded, so edits share it.
    ask: Ask | None = Field(default=None, exclude=True)
    query: str = ""
    queries: list[str] = Field(default_factory=list)
    candidates: dict[str, NodeWithScore] = Field(default_factory=dict)
    grades: dict[str, Grade] = Field(default_factory=dict)
    decision: DecisionResult | None = None
    sources: list[Source] = Field(default_factory=list)  # the prefix of every call of the current round
    web: list[Source] = Field(default_factory=list)  # web results, once the web was searched
    evidence: list[tuple[Evidence, Grade]] = Field(default_factory=list)  # the units asked about, graded
    parts: list[str] = Field(default_factory=list)  # the question's parts
    chosen: list[Evidence] = Field(default_factory=list)  # the units the answer is written from
    set_aside: list[Span] = Field(default_factory=list)  # chosen spans whose paragraph is written to an AI model
    strong: bool = False  # the evidence cleared the calibrated threshold: no refusal is offered
    verified: list[Sentence] = Field(default_factory=list)  # sentences that passed, in the order they did
    dropped: list[Sentence] = Field(default_factory=list)  # sentences that failed after their revision
    answer: str = ""
    draft: Draft | None = None  # the assembled answer
    rewrites: int = 0
    revisions: int = 0
    web_tried: bool = False  # the web was searched (with results or not): never twice
    web_used: bool = False  # web results are among the sources
    verdict: SupportVerdict = NOT_APPLICABLE
    usefulness: Usefulness | None = None
    flagged: bool = False
    retrieval_used: bool = True
    basis: frozenset[str] = frozenset()  # ids of the current round's sources
    not_found_from: list[frozenset[str]] = Field(default_factory=list)  # source sets that gave no answer

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
