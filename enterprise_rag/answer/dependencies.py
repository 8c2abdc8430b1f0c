"""What the answer workflow is built with: the shapes of its injected collaborators."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from enterprise_rag.answer.checks.addressee import AddresseeCheck
from enterprise_rag.answer.checks.grading import Grader
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.principal import Principal
from enterprise_rag.retrieval.retriever import RetrievalResult


class Retrieval(Protocol):
    """Permission-scoped retrieval: the best ``top_k`` passages ``principal`` may read for ``query``."""

    def __call__(self, principal: Principal, query: str, top_k: int) -> RetrievalResult: ...


GraderFactory = Callable[[LLMCaller], Grader]
"""A relevance grader whose LLM calls go through the given (per-run) caller."""

ScreenFactory = Callable[[LLMCaller], AddresseeCheck]
"""The addressee screen, its LLM calls through the given (per-run) caller."""

EgressCheck = Callable[[Principal], bool]
"""Whether a principal's question may go to the web source."""
