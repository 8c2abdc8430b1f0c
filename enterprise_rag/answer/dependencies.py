"""What the answer workflow is built with: the shapes of its injected collaborators."""

from __future__ import annotations

from collections.abc import Callable

from enterprise_rag.answer.checks.addressee import AddresseeCheck
from enterprise_rag.answer.checks.grading import Grader
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.principal import Principal

GraderFactory = Callable[[LLMCaller], Grader]
"""A relevance grader whose LLM calls go through the given (per-run) caller."""

ScreenFactory = Callable[[LLMCaller], AddresseeCheck]
"""The addressee screen, its LLM calls through the given (per-run) caller."""

EgressCheck = Callable[[Principal], bool]
"""Whether a principal's question may go to the web source."""
