"""Runs queries on the one answer workflow: per query a trace, an LLM caller and the timing; resume by trace id."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Mapping
from typing import Any, TypeVar

from llama_index.core.llms import LLM
from workflows.events import Event
from workflows.handler import WorkflowHandler

from enterprise_rag.answer.checks.citations import split_sentences
from enterprise_rag.answer.events import Ask, Drafting, StepFinished, StepStarted
from enterprise_rag.answer.streaming import StreamEvent
from enterprise_rag.answer.workflow import AnswerWorkflow
from enterprise_rag.config import WorkflowSettings
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.principal import Principal
from enterprise_rag.schema.result import QueryResult
from enterprise_rag.schema.sources import History
from enterprise_rag.store.traces import TraceRecorder, TraceStore, new_trace_id, storable_text

T = TypeVar("T")


class AnswerRunner:
    """Answers questions with one shared :class:`AnswerWorkflow`, which serves concurrent queries too.

    Each query gets its own trace and its own :class:`LLMCaller` (its call counts are the
    query's), handed to the workflow in the :class:`Ask` event. A trace is finished as done
    with the result, or as failed with the error, whatever ends the run.
    """

    def __init__(
        self, workflow: AnswerWorkflow, traces: TraceStore, llms: Mapping[str, LLM], settings: WorkflowSettings
    ) -> None:
        self.workflow = workflow
        self._traces = traces
        self._llms = dict(llms)
        self._cfg = settings

    async def run(
        self, question: str, principal: Principal, history: History | None = None, trace_id: str | None = None
    ) -> QueryResult:
        """Answer ``question`` for ``principal``; with the ``trace_id`` of an unfinished run, resume it."""
        handler, trace_id, t0 = self._start(question, principal, history, trace_id)
        try:
            result: QueryResult = await handler
        except BaseException as exc:  # also cancellation and interrupts: the trace must not stay 'running'
            self._failed(trace_id, exc)
            raise
        return self._finished(result, trace_id, t0)

    async def stream(
        self, question: str, principal: Principal, history: History | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """``started`` and ``step`` events as each step begins and finishes, ``draft`` pieces as the generator
        writes (from the workflow's event stream), then the checked answer sentence by sentence, then the
        ``result``. Leaving the stream early cancels the run."""
        handler, trace_id, t0 = self._start(question, principal, history, None)
        ended = asyncio.ensure_future(handler)
        try:
            async with contextlib.aclosing(_until_ended(handler.stream_events(), ended)) as events:
                async for event in events:
                    if isinstance(event, StepStarted):
                        yield StreamEvent("started", name=event.name)
                    elif isinstance(event, StepFinished):
                        yield StreamEvent("step", name=event.name, data=event.data, seconds=event.seconds)
                    elif isinstance(event, Drafting):
                        yield StreamEvent("draft", text=event.text)
            result: QueryResult = await ended
        except BaseException as exc:
            if not ended.done():
                await handler.cancel_run()
                await asyncio.gather(ended, return_exceptions=True)
            self._failed(trace_id, exc)
            raise
        result = self._finished(result, trace_id, t0)
        for sentence in split_sentences(result.answer) or [result.answer]:
            yield StreamEvent("answer", text=sentence)
        yield StreamEvent("result", data=result)

    def _start(
        self, question: str, principal: Principal, history: History | None, trace_id: str | None
    ) -> tuple[WorkflowHandler, str, float]:
        # NUL bytes and unpaired surrogates would fail every trace write: replaced once, here
        question = storable_text(question)
        turns = [{k: storable_text(str(v)) for k, v in turn.items()} for turn in history or []]
        trace_id = trace_id or new_trace_id()
        self._traces.start(trace_id, principal, question, turns)
        recorder = TraceRecorder(self._traces, trace_id)
        cfg = self._cfg
        caller = LLMCaller(
            self._llms, recorder, timeout_s=cfg.llm_timeout_s, max_retries=cfg.llm_max_retries,
            backoff_s=cfg.llm_backoff_s,
        )  # fmt: skip
        ask = Ask(question=question, history=turns, principal=principal, caller=caller, recorder=recorder)
        t0 = time.perf_counter()
        return self.workflow.run(start_event=ask), trace_id, t0

    def _finished(self, result: QueryResult, trace_id: str, t0: float) -> QueryResult:
        result.trace_id = trace_id
        result.pipeline["latency_ms"] = round((time.perf_counter() - t0) * 1000)
        self._traces.finish(trace_id, result.to_dict())
        return result

    def _failed(self, trace_id: str, exc: BaseException) -> None:
        self._traces.finish(trace_id, None, error=f"{type(exc).__name__}: {exc}")


async def _until_ended(events: AsyncIterator[Event], ended: asyncio.Future[Any]) -> AsyncGenerator[Event, None]:
    """``events`` until the stream ends, or until the run has ended in a way its stream never reports.

    A run stopped by an exception that is not an ``Exception`` (an interrupt, a cancellation) does not
    close its event stream, so each read races the run's end.
    """
    while True:
        pending = asyncio.ensure_future(anext(events))
        await asyncio.wait({pending, ended}, return_when=asyncio.FIRST_COMPLETED)
        if not pending.done() and (ended.cancelled() or not isinstance(ended.exception(), Exception | None)):
            pending.cancel()
            return
        try:
            event = await pending
        except StopAsyncIteration:
            return
        yield event


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, also inside a running loop (Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
