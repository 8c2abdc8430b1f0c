"""What one answer run knows so far: the question, candidates, grades, sources, draft and loop counters.

The workflow's steps read and update it; :class:`~enterprise_rag.answer.outcome.Outcome` is made from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llama_index.core.schema import NodeWithScore

from enterprise_rag.answer.checks.decision import DecisionResult
from enterprise_rag.answer.checks.grading import Grade
from enterprise_rag.answer.checks.support import NOT_APPLICABLE, SupportVerdict
from enterprise_rag.principal import Principal
from enterprise_rag.schema.sources import History, Source


@dataclass
class RunState:
    question: str
    principal: Principal
    history: History
    query: str = ""
    queries: list[str] = field(default_factory=list)
    candidates: dict[str, NodeWithScore] = field(default_factory=dict)
    grades: dict[str, Grade] = field(default_factory=dict)
    decision: DecisionResult | None = None
    sources: list[Source] = field(default_factory=list)
    answer: str = ""
    rewrites: int = 0
    citation_revisions: int = 0
    hallucination_retries: int = 0
    usefulness_retries: int = 0
    web_used: bool = False
    verdict: SupportVerdict = NOT_APPLICABLE
    flagged: bool = False
    retrieval_used: bool = True
    basis: frozenset[str] = frozenset()  # ids of the sources of the current draft
    not_found_from: list[frozenset[str]] = field(default_factory=list)  # source sets with no answer in them
    second_opinion: bool = False  # the current draft is the second opinion (see the module docstring)
    second_opinion_asked: bool = False  # at most one per query

    @property
    def answered(self) -> str:
        """The question generation answers: a follow-up's standalone form, else the question as asked."""
        return self.query if self.history else self.question
