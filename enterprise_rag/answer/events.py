"""The events of the answer workflow: each carries what the step it starts needs.

:class:`Ask` starts a run with its question and its per-run collaborators (the
LLM caller, which counts the run's calls, and the trace recorder), so one
workflow instance serves every query. :class:`StepFinished` is not routed to a
step: it is written to the run's event stream when a step has recorded what it
did, which is how progress is streamed.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.schema import NodeWithScore
from workflows.events import Event, StartEvent

from enterprise_rag.answer.checks.decision import DecisionResult
from enterprise_rag.answer.checks.draft import Draft
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.principal import Principal
from enterprise_rag.schema.spans import Span
from enterprise_rag.store.traces import TraceRecorder


class Ask(StartEvent):
    """One query: the question as asked, its conversation, who asks, and the run's LLM caller and trace."""

    question: str
    history: list[dict[str, str]]
    principal: Principal
    caller: LLMCaller
    recorder: TraceRecorder


class Retrieve(Event):
    query: str


class Retrieved(Event):
    """Passages a retrieval found that the run had not seen yet, to grade."""

    passages: list[NodeWithScore]


class Graded(Event):
    """Every candidate has a grade; the decision they make."""

    decision: DecisionResult


class Rewrite(Event):
    reason: str


class WebFallback(Event):
    reason: str


class Generate(Event):
    """Write one answer sentence from each of ``spans``; with ``failed`` (one (sentence, why it failed) per
    span), write those spans' sentences again."""

    spans: list[Span]
    failed: list[tuple[str, str]] = []


class Drafted(Event):
    """A draft written from ``spans``."""

    draft: Draft
    spans: list[Span]


class Verified(Event):
    """Every sentence written so far is verified or dropped: assemble the answer."""


class StepStarted(Event):
    """Streamed progress: a step has begun."""

    name: str


class StepFinished(Event):
    """Streamed progress: a step, what it wrote into the trace, and how long it took."""

    name: str
    data: dict[str, Any]
    seconds: float = 0.0


class Drafting(Event):
    """Streamed progress: the next piece of a draft answer as the generator writes it (unchecked)."""

    text: str
