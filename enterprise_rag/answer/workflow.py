"""The corrective, self-checking answer workflow, one step per stage.

prepare -> retrieve -> grade -> decide -> (rewrite -> retrieve ...)* -> [web] -> refine
-> generate -> citations -> check -> (revise | rerun)* -> finish

Every loop has a cap; every step writes what it did into the trace. Grading
fails open (passages kept, ungraded); the support check fails closed (the
answer is flagged). With no passage left, the not-found answer is returned
without a generation call.

"Not found" is gated in code, not taken from the model: when the generator
finds nothing in passages the grader judged relevant, it is asked once more,
told the answer is there (a second opinion). That draft has no not-found exit,
so it is kept only if it passes every check unrevised: the review in code
(:mod:`enterprise_rag.answer.checks.draft`), then support and usefulness;
otherwise the first verdict stands.

One :class:`AnswerWorkflow` serves every query, concurrent ones included: what
a run knows lives in its ``Context`` (:class:`~enterprise_rag.answer.state.RunState`),
its collaborators come in its :class:`~enterprise_rag.answer.events.Ask` event,
and the instance holds only the dependencies it was built with.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any, Protocol

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import ChatMessage
from llama_index.core.schema import NodeWithScore
from workflows import Context, Workflow, step
from workflows.events import StopEvent

from enterprise_rag.answer.checks.citations import cited_labels, says_nothing, states_not_found
from enterprise_rag.answer.checks.decision import DecisionResult, decide
from enterprise_rag.answer.checks.draft import review_draft
from enterprise_rag.answer.checks.grading import Grader
from enterprise_rag.answer.checks.support import UNKNOWN, verdict_from_check
from enterprise_rag.answer.events import (
    Ask,
    CitationsChecked,
    Drafted,
    Generate,
    Graded,
    Refine,
    Retrieve,
    Retrieved,
    Rewrite,
    StepFinished,
    WebFallback,
)
from enterprise_rag.answer.outcome import Outcome
from enterprise_rag.answer.sources import corpus_sources, refine, relabel, web_sources
from enterprise_rag.answer.state import RunState
from enterprise_rag.answer.web import WebSearch, more_phrasings, search_all
from enterprise_rag.config import WorkflowSettings
from enterprise_rag.errors import LLMError, WebSearchError
from enterprise_rag.llm import prompts
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.llm.prompts import NOT_FOUND_ANSWER
from enterprise_rag.principal import Principal
from enterprise_rag.retrieval.retriever import RetrievalResult
from enterprise_rag.retrieval.transforms import Chat, standalone_question
from enterprise_rag.schema.sources import Source

FLAGGED_ANSWER = (
    "I could not produce an answer that the documents fully support, so this question has been flagged for "
    "review. Please check the cited sources directly."
)
_SMALLTALK = re.compile(r"^\s*(hi|hello|hey|thanks|thank you|good (morning|afternoon|evening))[\s!.]*$", re.I)


class Retrieval(Protocol):
    """Permission-scoped retrieval: the best ``top_k`` passages ``principal`` may read for ``query``."""

    def __call__(self, principal: Principal, query: str, top_k: int) -> RetrievalResult: ...


GraderFactory = Callable[[LLMCaller], Grader]
"""A relevance grader whose LLM calls go through the given (per-run) caller."""

EgressCheck = Callable[[Principal], bool]
"""Whether a principal's question may go to the web source."""


def _record(ctx: Context[RunState], s: RunState, name: str, t0: float, **data: Any) -> None:
    """Write a step into the run's trace, then onto its event stream."""
    s.run.recorder.step(name, data, (time.perf_counter() - t0) * 1000)
    ctx.write_event_to_stream(StepFinished(name=name, data=data))


def _standalone_chat(caller: LLMCaller) -> Chat:
    def chat(messages: list[ChatMessage], max_tokens: int) -> str:
        return str(caller.call("grader", "standalone", messages, max_tokens=max_tokens))

    return chat


def _web_of(s: RunState) -> list[Source]:
    """The web sources among the run's current sources (they stay when the corpus is searched again)."""
    return [x for x in s.sources if x.kind == "web"]


class AnswerWorkflow(Workflow):
    """Answers :class:`Ask` events; dependencies come in through the constructor, per-run ones in the event."""

    def __init__(
        self,
        *,
        retrieve: Retrieval,
        grader: GraderFactory,
        embed_model: BaseEmbedding,
        egress_allows: EgressCheck,
        web_search: WebSearch,
        settings: WorkflowSettings,
    ) -> None:
        super().__init__(timeout=None)
        self._retrieve = retrieve
        self._grader = grader
        self._embed_model = embed_model
        self._egress_allows = egress_allows
        self._web_search = web_search
        self._cfg = settings

    def _done(self, s: RunState, answer: str, *, not_found: bool = False) -> StopEvent:
        s.answer = answer
        return StopEvent(
            result=Outcome.from_state(s, s.run.caller, not_found=not_found, web_cap=self._cfg.web_confidence_cap)
        )

    # -- 1. standalone rewrite and retrieval necessity
    @step
    async def prepare(self, ctx: Context[RunState], ev: Ask) -> Retrieve | StopEvent:
        t0 = time.perf_counter()
        async with ctx.store.edit_state() as s:
            s.ask = ev
            if _SMALLTALK.match(ev.question) and not ev.history:
                s.retrieval_used = False
                _record(ctx, s, "prepare", t0, needs_retrieval=False)
                return self._done(s, "Hello! Ask me a question about your organisation's documents.")
            chat = _standalone_chat(ev.caller)
            s.query, _ = await asyncio.to_thread(standalone_question, chat, ev.question, ev.history)
            _record(ctx, s, "prepare", t0, needs_retrieval=True, standalone_question=s.query)
            return Retrieve(query=s.query)

    # -- 2-4. hybrid retrieval, parent merging, rerank (inside the retriever)
    @step
    async def retrieve(self, ctx: Context[RunState], ev: Retrieve) -> Retrieved:
        t0 = time.perf_counter()
        async with ctx.store.edit_state() as s:
            s.queries.append(ev.query)
            result = await asyncio.to_thread(self._retrieve, s.run.principal, ev.query, self._cfg.top_k)
            new = []
            for n in result.nodes:
                if n.node.node_id not in s.candidates:
                    s.candidates[n.node.node_id] = n
                    new.append(n)
            _record(ctx, s, "retrieve", t0, query=ev.query, results=result.trace.get("results"),
                    candidates=len(result.trace.get("candidates", [])), merged=result.trace.get("merged"),
                    expanded=result.trace.get("expanded"))  # fmt: skip
            return Retrieved(passages=new)

    # -- 5. relevance grading (batched, floored, cached, fail-open)
    @step
    async def grade(self, ctx: Context[RunState], ev: Retrieved) -> Graded:
        t0 = time.perf_counter()
        async with ctx.store.edit_state() as s:
            if ev.passages:
                grader = self._grader(s.run.caller)
                for g in await asyncio.to_thread(grader.grade, s.answered, ev.passages):
                    s.grades[g.node_id] = g
            d = s.decision = decide(list(s.grades.values()), min_yes=self._cfg.min_yes)
            _record(ctx, s, "grade", t0, grades=[g.to_dict() for g in s.grades.values()], decision=d.decision,
                    reason=d.reason, relevance=d.relevance)  # fmt: skip
            return Graded(decision=d)

    # -- 6. decision: proceed / augment / fallback, rewrites first
    @step
    async def route(self, ctx: Context[RunState], ev: Graded) -> Rewrite | WebFallback | Refine | StopEvent:
        d = ev.decision
        async with ctx.store.edit_state() as s:
            if d.decision == "proceed":
                return Refine(web=_web_of(s))
            if d.ambiguous and s.rewrites < self._cfg.max_query_rewrites:
                return Rewrite(reason=d.reason)
            if self._egress_allows(s.run.principal):
                return WebFallback(reason=d.reason)
            if d.decision == "augment":
                return Refine(web=_web_of(s))
            return self._done(s, NOT_FOUND_ANSWER, not_found=True)

    @step
    async def rewrite(self, ctx: Context[RunState], ev: Rewrite) -> Retrieve:
        t0 = time.perf_counter()
        async with ctx.store.edit_state() as s:
            s.rewrites += 1
            try:
                reply = await s.run.caller.acall("grader", "rewrite", prompts.rewrite_messages(s.query, s.queries),
                                                 max_tokens=64)  # fmt: skip
                query = next((ln.strip().strip('"') for ln in str(reply).splitlines() if ln.strip()), s.query)
            except LLMError:
                query = s.query
            _record(ctx, s, "rewrite", t0, reason=ev.reason, query=query, attempt=s.rewrites)
            return Retrieve(query=query)

    # -- 7. guarded web fallback (egress policy checked again here)
    @step
    async def web(self, ctx: Context[RunState], ev: WebFallback) -> Refine | StopEvent:
        t0 = time.perf_counter()
        cfg = self._cfg
        async with ctx.store.edit_state() as s:
            if not self._egress_allows(s.run.principal):
                return self._done(s, NOT_FOUND_ANSWER, not_found=True)
            phrasings = [s.query]
            if s.decision is not None and s.decision.decision == "fallback" and cfg.web_phrasings > 1:
                phrasings += await asyncio.to_thread(more_phrasings, s.run.caller, s.query, cfg.web_phrasings - 1)
            error = None
            try:
                results = await asyncio.to_thread(search_all, self._web_search, phrasings, cfg.max_sources)
            except WebSearchError as exc:  # a web outage must not fail the query: go on with the corpus
                error, results = str(exc), []
            s.web_used = bool(results)
            _record(ctx, s, "web", t0, reason=ev.reason, phrasings=phrasings, results=[r.url for r in results],
                    error=error)  # fmt: skip
            if not results and not self._kept_nodes(s):
                return self._done(s, NOT_FOUND_ANSWER, not_found=True)
            s.sources = web_sources(results, 1)
            return Refine(web=s.sources)

    def _kept_nodes(self, s: RunState) -> list[NodeWithScore]:
        """Passages for the generator, best retrieval score first: on proceed those graded yes or partial
        (a small grader often calls the answering passage partial and a neighbour yes); otherwise the
        partial and ungraded ones."""
        proceed = s.decision is not None and s.decision.decision == "proceed"
        wanted = {"yes", "partial"} if proceed else {"partial", "ungraded"}
        ranked = sorted(s.candidates.values(), key=lambda n: -(n.score or 0.0))
        kept = [n for n in ranked if n.node.node_id in s.grades and s.grades[n.node.node_id].grade in wanted]
        return kept[: self._cfg.max_sources]

    # -- 8. context refinement
    @step
    async def refine(self, ctx: Context[RunState], ev: Refine) -> Generate | Rewrite | WebFallback | StopEvent:
        t0 = time.perf_counter()
        async with ctx.store.edit_state() as s:
            kept = self._kept_nodes(s)
            sources = relabel(corpus_sources(kept) + ev.web)
            if not sources:
                return self._done(s, NOT_FOUND_ANSWER, not_found=True)
            s.basis = frozenset([n.node.node_id for n in kept] + [w.source for w in ev.web])
            if s.basis in s.not_found_from:  # a rewrite found nothing new: the same sources hold no answer
                _record(ctx, s, "refine", t0, skipped="same sources as a draft that found no answer")
                return self._generator_found_nothing(s)
            s.sources, dropped = await asyncio.to_thread(
                refine, s.run.question, sources, self._embed_model, self._cfg.refine_floor
            )
            _record(ctx, s, "refine", t0, sources=[(x.label, x.source, x.page, x.kind) for x in s.sources],
                    strips_dropped=dropped)  # fmt: skip
            return Generate(sources=s.sources, question=s.answered)

    # -- 9. generation (and revisions, which share the same prefix)
    @step
    async def generate(self, ctx: Context[RunState], ev: Generate) -> Drafted:
        t0 = time.perf_counter()
        async with ctx.store.edit_state() as s:
            if ev.feedback:
                name, messages = "revise", prompts.revise_messages(ev.sources, ev.question, ev.draft, ev.feedback)
            else:
                name = "reconsider" if s.second_opinion else "generate"
                messages = prompts.generate_messages(ev.sources, ev.question, answer_known=s.second_opinion)
            try:
                reply = await s.run.caller.acall("generator", name, messages, max_tokens=self._cfg.answer_max_tokens)
            except LLMError:
                if not s.second_opinion:
                    raise
                reply = NOT_FOUND_ANSWER  # the second opinion is optional: if it fails, the first verdict stands
            s.answer = str(reply).strip()
            _record(ctx, s, "generate", t0, revision=bool(ev.feedback), second_opinion=s.second_opinion,
                    feedback=ev.feedback, answer=s.answer)  # fmt: skip
            return Drafted(answer=s.answer)

    # -- 10. citation check in code
    @step
    async def citations(
        self, ctx: Context[RunState], ev: Drafted
    ) -> Generate | CitationsChecked | Rewrite | WebFallback | StopEvent:
        t0 = time.perf_counter()
        async with ctx.store.edit_state() as s:
            if (states_not_found(ev.answer) and not cited_labels(ev.answer)) or says_nothing(ev.answer):  # labels only
                if self._second_opinion_due(s):
                    s.second_opinion = s.second_opinion_asked = True
                    _record(ctx, s, "citations", t0, not_found=True,
                            second_opinion="asked: the grader judged a passage relevant")  # fmt: skip
                    return Generate(sources=s.sources, question=s.answered)
                # The generator is the last relevance judge: no answer in the kept sources is a fallback.
                _record(ctx, s, "citations", t0, not_found=True)
                return self._generator_found_nothing(s)
            rephrased = s.run.question if s.run.history else s.query  # its words, too, may be repeated unsourced
            sources = {x.label: x.text for x in s.sources}
            review = review_draft(ev.answer, sources, s.answered, second_opinion=s.second_opinion, rephrased=rephrased)
            s.answer = review.answer
            _record(ctx, s, "citations", t0, **review.to_trace())
            if s.second_opinion and not review.fit_as_second_opinion:
                return self._generator_found_nothing(s)  # a second opinion is never revised: the first verdict stands
            if review.needs_revision and s.citation_revisions < self._cfg.max_citation_revisions:
                s.citation_revisions += 1
                return Generate(sources=s.sources, question=s.answered, feedback=review.feedback(), draft=review.answer)
            return CitationsChecked(answer=review.answer)

    def _second_opinion_due(self, s: RunState) -> bool:
        """The generator found nothing, but the grader judged a kept passage relevant (yes or partial)."""
        if not self._cfg.second_opinion or s.second_opinion_asked:
            return False
        grades = [s.grades.get(x.node_id) for x in s.sources if x.kind == "corpus"]
        return any(g is not None and g.grade in ("yes", "partial") for g in grades)

    def _generator_found_nothing(self, s: RunState) -> Rewrite | WebFallback | StopEvent:
        s.second_opinion = False
        if s.basis not in s.not_found_from:
            s.not_found_from.append(s.basis)
        s.decision = DecisionResult("fallback", True, min(s.decision.relevance if s.decision else 0.0, 0.3),
                                    "the generator found no answer in the kept sources")  # fmt: skip
        if s.rewrites < self._cfg.max_query_rewrites:
            return Rewrite(reason=s.decision.reason)
        if self._egress_allows(s.run.principal) and not s.web_used:
            return WebFallback(reason=s.decision.reason)
        return self._done(s, NOT_FOUND_ANSWER, not_found=True)

    # -- 11-12. support (claim level) and usefulness, one grader call sharing the generation prefix
    @step
    async def check(self, ctx: Context[RunState], ev: CitationsChecked) -> Generate | Rewrite | WebFallback | StopEvent:
        t0 = time.perf_counter()
        cfg = self._cfg
        async with ctx.store.edit_state() as s:
            try:
                reply = await s.run.caller.acall(
                    "grader",
                    "check",
                    prompts.check_messages(s.sources, s.answered, ev.answer, answer_known=s.second_opinion),
                    max_tokens=cfg.check_max_tokens,
                    schema=prompts.CHECK_SCHEMA,
                )
                s.verdict = verdict_from_check(reply)
            except LLMError:
                s.verdict = UNKNOWN  # fail-closed: an unchecked answer is never reported as supported
            threshold = cfg.web_support_threshold if s.web_used else cfg.support_threshold
            _record(ctx, s, "check", t0, support=s.verdict.to_support_dict(),
                    usefulness=s.verdict.to_usefulness_dict(), threshold=threshold)  # fmt: skip
            if s.second_opinion and not (s.verdict.passed(threshold) and s.verdict.answers_question):
                return self._generator_found_nothing(s)
            if not s.verdict.passed(threshold):
                if s.verdict.label != "unknown" and s.hallucination_retries < cfg.max_hallucination_retries:
                    s.hallucination_retries += 1
                    claims = "\n".join(f"- Not supported by the sources: {c}" for c in s.verdict.unsupported_claims)
                    feedback = claims or "Some statements are not supported by the sources."
                    return Generate(sources=s.sources, question=s.answered, feedback=feedback, draft=ev.answer)
                s.flagged = True
                return self._done(s, FLAGGED_ANSWER)
            if not s.verdict.answers_question and s.usefulness_retries < cfg.max_usefulness_retries:
                s.usefulness_retries += 1
                return Rewrite(reason="the answer does not address the question")
            return self._done(s, ev.answer)
