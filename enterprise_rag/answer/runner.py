"""Runs the answer workflow for one question: dependencies, trace, timing, resume."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from enterprise_rag.answer.checks.grading import Grader
from enterprise_rag.answer.state import RunState
from enterprise_rag.answer.workflow import AnswerWorkflow
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.principal import Principal
from enterprise_rag.retrieval.retriever import RetrievalResult
from enterprise_rag.schema.result import QueryResult
from enterprise_rag.schema.sources import History, WebResult
from enterprise_rag.store.traces import TraceRecorder, TraceStore, new_trace_id, storable_text

if TYPE_CHECKING:
    from enterprise_rag.rag import EnterpriseRAG

logger = logging.getLogger(__name__)
T = TypeVar("T")


class WorkflowDeps:
    """What the workflow needs from the outside world, for one query."""

    def __init__(self, rag: EnterpriseRAG, recorder: TraceRecorder) -> None:
        self._rag = rag
        self.recorder = recorder
        self.embed_model = rag.providers.embed_model

    async def retrieve(self, principal: Principal, query: str, top_k: int) -> RetrievalResult:
        retriever = self._rag.as_retriever(principal, top_k=top_k)
        return await asyncio.to_thread(retriever.retrieve_with_trace, query)

    def grader(self, caller: LLMCaller) -> Grader:
        cfg = self._rag.settings.workflow
        return Grader(
            self._rag.db,
            caller,
            floor=cfg.grade_floor,
            keep_similarity=cfg.grade_keep_similarity,
            passage_chars=cfg.grade_passage_chars,
            embed_model=self.embed_model,
        )

    def egress_allows(self, principal: Principal) -> bool:
        return bool(self._rag.providers.egress_policy.allows(principal))

    def expand(self, caller: LLMCaller, query: str, n: int) -> list[str]:
        from enterprise_rag.llm.prompts import rewrite_messages

        phrasings: list[str] = []
        for _ in range(n):
            reply = caller.call("grader", "rewrite", rewrite_messages(query, [query, *phrasings]), max_tokens=64)
            line = next((ln.strip().strip('"') for ln in str(reply).splitlines() if ln.strip()), "")
            if line and line not in phrasings:
                phrasings.append(line)
        return phrasings

    def web_search(self, phrasings: list[str]) -> list[WebResult]:
        provider = self._rag.providers.web_search
        if provider is None:
            return []
        seen: dict[str, WebResult] = {}
        for phrase in phrasings:
            for result in provider.search(phrase):
                seen.setdefault(result.url, result)
        return sorted(seen.values(), key=lambda r: -r.score)[: self._rag.settings.workflow.max_sources]


StepListener = Callable[[str, dict[str, Any]], None]


async def run_query(
    rag: EnterpriseRAG,
    question: str,
    principal: Principal,
    history: History | None,
    trace_id: str | None = None,
    on_step: StepListener | None = None,
) -> QueryResult:
    """Answer ``question`` for ``principal``; with the ``trace_id`` of an unfinished run, resume it."""
    cfg = rag.settings.workflow
    # NUL bytes and unpaired surrogates would fail every trace write: replaced once, here
    question = storable_text(question)
    history = [{k: storable_text(str(v)) for k, v in turn.items()} for turn in history or []]
    trace_id = trace_id or new_trace_id()
    store = TraceStore(rag.db)
    store.start(trace_id, principal, question, list(history or []))
    recorder = TraceRecorder(store, trace_id, on_step)
    caller = LLMCaller(
        {"generator": rag.providers.generator, "grader": rag.providers.grader}, recorder,
        timeout_s=cfg.llm_timeout_s, max_retries=cfg.llm_max_retries, backoff_s=cfg.llm_backoff_s,
    )  # fmt: skip
    state = RunState(question=question, principal=principal, history=list(history or []))
    workflow = AnswerWorkflow(deps=WorkflowDeps(rag, recorder), state=state, caller=caller, settings=rag.settings)
    t0 = time.perf_counter()
    try:
        result: QueryResult = await workflow.run()
    except BaseException as exc:  # also cancellation and interrupts: the trace must not stay 'running'
        store.finish(trace_id, None, error=f"{type(exc).__name__}: {exc}")
        raise
    result.trace_id = trace_id
    result.pipeline["latency_ms"] = round((time.perf_counter() - t0) * 1000)
    store.finish(trace_id, result.to_dict())
    return result


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, also inside a running loop (Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
