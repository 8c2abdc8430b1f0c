"""The corrective, self-checking answer workflow, one step per stage.

prepare -> retrieve -> grade -> decide -> (rewrite -> retrieve ...)* -> [web] -> refine
-> generate -> citations -> check -> (revise | rerun)* -> finish

Every loop has a cap; every step writes what it did into the trace. Grading
fails open (passages kept, ungraded); the support check fails closed (the
answer is flagged). With no passage left, the not-found answer is returned
without a generation call.

The generator replies with ``[S1]``-cited text or exactly the not-found answer,
read into a :class:`~enterprise_rag.answer.checks.draft.Draft`. "Not found" is that
reply as a whole, a structural signal, never a phrase of the answer. Every sentence is verified in code
(:mod:`enterprise_rag.answer.checks.verification`); one that fails is revised once,
then dropped, and a draft with nothing left is a not-found. The verifier then
checks each remaining sentence as a claim, without being told whether an answer
exists; what it does not support is left out, or the answer is flagged.

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

from enterprise_rag.answer.checks.coverage import unanswered_parts
from enterprise_rag.answer.checks.decision import DecisionResult, decide
from enterprise_rag.answer.checks.draft import Draft
from enterprise_rag.answer.checks.grading import Grader
from enterprise_rag.answer.checks.support import UNKNOWN, verdict_from_check
from enterprise_rag.answer.checks.verification import verify_draft
from enterprise_rag.answer.events import (
    Ask,
    CitationsChecked,
    Drafted,
    Drafting,
    Generate,
    Graded,
    Refine,
    Retrieve,
    Retrieved,
    Rewrite,
    StepFinished,
    StepStarted,
    WebFallback,
)
from enterprise_rag.answer.outcome import Outcome
from enterprise_rag.answer.sources import corpus_sources, kept_passages, refine, relabel, web_sources
from enterprise_rag.answer.state import RunState
from enterprise_rag.answer.web import WebSearch, more_phrasings, search_all
from enterprise_rag.config import WorkflowSettings
from enterprise_rag.errors import LLMError, WebSearchError
from enterprise_rag.llm import prompts
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.llm.prompts import NOT_FOUND_ANSWER
from enterprise_rag.llm.untrusted import addresses_model
from enterprise_rag.principal import Principal
from enterprise_rag.retrieval.retriever import RetrievalResult
from enterprise_rag.retrieval.transforms import Chat, concatenated_query, standalone_question
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


def _begin(ctx: Context[RunState], name: str) -> float:
    """Announce a step on the run's event stream; returns its start time."""
    ctx.write_event_to_stream(StepStarted(name=name))
    return time.perf_counter()


def _record(ctx: Context[RunState], s: RunState, name: str, t0: float, **data: Any) -> None:
    """Write a step into the run's trace, then onto its event stream."""
    seconds = time.perf_counter() - t0
    s.run.recorder.step(name, data, seconds * 1000)
    ctx.write_event_to_stream(StepFinished(name=name, data=data, seconds=seconds))


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
        t0 = _begin(ctx, "prepare")
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
        t0 = _begin(ctx, "retrieve")
        async with ctx.store.edit_state() as s:
            s.queries.append(ev.query)
            result = await asyncio.to_thread(self._retrieve, s.run.principal, ev.query, self._cfg.top_k)
            s.run.recorder.documents({str(n.node.metadata.get("document_id", "")) for n in result.nodes} - {""})
            new = []
            for n in result.nodes:
                if n.node.node_id not in s.candidates:
                    s.candidates[n.node.node_id] = n
                    new.append(n)
            _record(ctx, s, "retrieve", t0, query=ev.query, results=result.trace.get("results"),
                    candidates=len(result.trace.get("candidates", [])), merged=result.trace.get("merged"),
                    expanded=result.trace.get("expanded"))  # fmt: skip
            return Retrieved(passages=new)

    # -- 5. relevance grading (over the sources generation will read, floored, cached, fail-open)
    @step
    async def grade(self, ctx: Context[RunState], ev: Retrieved) -> Graded:
        t0 = _begin(ctx, "grade")
        async with ctx.store.edit_state() as s:
            if ev.passages:
                grader = self._grader(s.run.caller)
                rejected, ranked = grader.under_floor(ev.passages)
                # Earlier rounds' kept passages compete for generation's places: grading asks over the set
                # generation would read, so a re-retrieval's answer reuses its grading prefix too.
                carried = kept_passages(
                    list(s.candidates.values()), s.grades, proceed=True, limit=self._cfg.max_sources
                )
                graded = await asyncio.to_thread(grader.grade_best, s.answered, ranked, self._cfg.max_sources,
                                                 lambda group: self._sources(s, group, [])[0], carried)  # fmt: skip
                s.grades.update((g.node_id, g) for g in rejected + graded)
            d = s.decision = decide(list(s.grades.values()), min_yes=self._cfg.min_yes)
            _record(ctx, s, "grade", t0, grades=[g.to_dict() for g in s.grades.values()], decision=d.decision,
                    reason=d.reason, relevance=d.relevance)  # fmt: skip
            return Graded(decision=d)

    def _sources(self, s: RunState, nodes: list[NodeWithScore], web: list[Source]) -> tuple[list[Source], int]:
        """The numbered, refined sources of ``nodes`` (best retrieval score first) and ``web``, the prefix that
        grading and generation share, and the strips refinement dropped."""
        return refine(s.run.question, relabel(corpus_sources(nodes) + web), self._embed_model, self._cfg.refine_floor)

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
        t0 = _begin(ctx, "rewrite")
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
        t0 = _begin(ctx, "web")
        cfg = self._cfg
        async with ctx.store.edit_state() as s:
            if not self._egress_allows(s.run.principal):
                return self._done(s, NOT_FOUND_ANSWER, not_found=True)
            # What leaves the machine comes from the user's words alone (never the standalone rewrite, which
            # may copy an assistant turn's internal facts); the web rewriter sees nothing else.
            phrasings = [concatenated_query(s.run.question, s.run.history)]
            if s.decision is not None and s.decision.decision == "fallback" and cfg.web_phrasings > 1:
                phrasings += await asyncio.to_thread(more_phrasings, s.run.caller, phrasings[0], cfg.web_phrasings - 1)
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
        proceed = s.decision is not None and s.decision.decision == "proceed"
        return kept_passages(list(s.candidates.values()), s.grades, proceed=proceed, limit=self._cfg.max_sources)

    # -- 8. context refinement
    @step
    async def refine(self, ctx: Context[RunState], ev: Refine) -> Generate | Rewrite | WebFallback | StopEvent:
        t0 = _begin(ctx, "refine")
        async with ctx.store.edit_state() as s:
            kept = self._kept_nodes(s)
            if not kept and not ev.web:
                return self._done(s, NOT_FOUND_ANSWER, not_found=True)
            s.basis = frozenset([n.node.node_id for n in kept] + [w.source for w in ev.web])
            if s.basis in s.not_found_from:  # a rewrite found nothing new: the same sources hold no answer
                _record(ctx, s, "refine", t0, skipped="same sources as a draft that found no answer")
                return self._generator_found_nothing(s)
            s.sources, dropped = await asyncio.to_thread(self._sources, s, kept, ev.web)
            _record(ctx, s, "refine", t0, sources=[(x.label, x.source, x.page, x.kind) for x in s.sources],
                    strips_dropped=dropped,
                    addresses_model=sorted({x.source for x in corpus_sources(kept) + ev.web
                                            if addresses_model(x.text)}))  # fmt: skip
            return Generate(sources=s.sources, question=s.answered)

    # -- 9. generation (and revisions, which share the same prefix)
    @step
    async def generate(self, ctx: Context[RunState], ev: Generate) -> Drafted:
        t0 = _begin(ctx, "generate")
        async with ctx.store.edit_state() as s:
            if ev.feedback and ev.draft is not None:
                name = "revise"
                messages = prompts.revise_messages(ev.sources, ev.question, ev.draft.render(), ev.feedback)
            else:
                name, messages = "generate", prompts.generate_messages(ev.sources, ev.question)
            loop = asyncio.get_running_loop()

            def drafted(text: str) -> None:  # from the caller's thread: hand it to the loop
                loop.call_soon_threadsafe(ctx.write_event_to_stream, Drafting(text=text))

            reply = await s.run.caller.acall("generator", name, messages, max_tokens=self._cfg.answer_max_tokens,
                                             on_text=drafted)  # fmt: skip
            s.draft = Draft.from_reply(str(reply))
            s.answer = s.draft.render()
            _record(ctx, s, "generate", t0, revision=bool(ev.feedback), feedback=ev.feedback,
                    found=s.draft.found, answer=s.answer)  # fmt: skip
            return Drafted(draft=s.draft)

    # -- 10. verification in code: labels, quotes, numbers and identifiers
    @step
    async def citations(
        self, ctx: Context[RunState], ev: Drafted
    ) -> Generate | CitationsChecked | Rewrite | WebFallback | StopEvent:
        t0 = _begin(ctx, "citations")
        async with ctx.store.edit_state() as s:
            before, s.kept_before = s.kept_before, None  # what passed before a citation revision, if any
            if ev.draft.not_found:
                _record(ctx, s, "citations", t0, not_found=True, kept_before=len(before.sentences) if before else 0)
                if before is not None and before.sentences:  # a revision that gives up loses no verified sentence
                    return self._checked(s, before)
                return self._generator_found_nothing(s)  # the generator is the last relevance judge
            sources = {x.label: x.text for x in s.sources}
            # The question's words may be repeated without a source, a follow-up's as asked and as rewritten.
            asked = f"{s.answered}\n{s.run.question}"
            checked = verify_draft(ev.draft, sources, asked, self._cfg.link_allow_list)
            unanswered = unanswered_parts(s.answered, checked.kept.render(), sources.values())
            _record(ctx, s, "citations", t0, **checked.to_trace(), unanswered=unanswered)
            if checked.unnamed:  # the sources are about something else: no revision can fix that
                return self._generator_found_nothing(s)
            if (checked.problems or unanswered) and s.citation_revisions < self._cfg.max_citation_revisions:
                s.citation_revisions += 1
                s.kept_before = checked.kept
                left_out = [f"- The answer does not address: {part} Add what the sources say about it."
                            for part in unanswered]  # fmt: skip
                feedback = "\n".join([checked.feedback(), *left_out]).strip()
                return Generate(sources=s.sources, question=s.answered, feedback=feedback, draft=ev.draft)
            kept = checked.kept if checked.kept.sentences or before is None else before
            if not kept.sentences:
                return self._generator_found_nothing(s)
            return self._checked(s, kept)

    @staticmethod
    def _checked(s: RunState, draft: Draft) -> CitationsChecked:
        s.draft, s.answer = draft, draft.render()
        return CitationsChecked(draft=draft)

    def _generator_found_nothing(self, s: RunState) -> Rewrite | WebFallback | StopEvent:
        if s.basis not in s.not_found_from:
            s.not_found_from.append(s.basis)
        s.decision = DecisionResult("fallback", True, min(s.decision.relevance if s.decision else 0.0, 0.3),
                                    "the generator found no answer in the kept sources")  # fmt: skip
        if s.rewrites < self._cfg.max_query_rewrites:
            return Rewrite(reason=s.decision.reason)
        if self._egress_allows(s.run.principal) and not s.web_used:
            return WebFallback(reason=s.decision.reason)
        return self._done(s, NOT_FOUND_ANSWER, not_found=True)

    # -- 11-12. support (one verdict per sentence) and usefulness, one grader call sharing the generation prefix
    @step
    async def check(self, ctx: Context[RunState], ev: CitationsChecked) -> Generate | Rewrite | WebFallback | StopEvent:
        t0 = _begin(ctx, "check")
        cfg = self._cfg
        async with ctx.store.edit_state() as s:
            evidenced = [sentence for sentence in ev.draft.sentences if sentence.quotes]  # not connecting lines
            claims = {f"C{i}": sentence.text for i, sentence in enumerate(evidenced, 1)}
            listing = [(cid, sentence.text, [(q.label, q.text) for q in sentence.quotes])
                       for cid, sentence in zip(claims, evidenced, strict=True)]  # fmt: skip
            try:
                reply = await s.run.caller.acall(
                    "grader",
                    "check",
                    prompts.check_messages(s.sources, s.answered, listing),
                    max_tokens=cfg.check_max_tokens,
                    schema=prompts.check_schema(list(claims)),
                )
                s.verdict = verdict_from_check(reply, claims)
            except LLMError:
                s.verdict = UNKNOWN  # fail-closed: an unchecked answer is never reported as supported
            threshold = cfg.web_support_threshold if s.web_used else cfg.support_threshold
            _record(ctx, s, "check", t0, support=s.verdict.to_support_dict(),
                    usefulness=s.verdict.to_usefulness_dict(), threshold=threshold)  # fmt: skip
            if not s.verdict.passed(threshold):
                if s.verdict.label != "unknown" and s.hallucination_retries < cfg.max_hallucination_retries:
                    s.hallucination_retries += 1
                    feedback = "\n".join(f"- Not supported by the sources: {c}" for c in s.verdict.unsupported_claims)
                    return Generate(sources=s.sources, question=s.answered, feedback=feedback, draft=ev.draft)
                s.flagged = True
                return self._done(s, FLAGGED_ANSWER)
            if not s.verdict.answers_question and s.usefulness_retries < cfg.max_usefulness_retries:
                s.usefulness_retries += 1
                return Rewrite(reason="the answer does not address the question")
            unsupported = set(s.verdict.unsupported_claims)
            s.draft = ev.draft.keep([x for x in ev.draft.sentences if x.text not in unsupported])
            return self._done(s, s.draft.render())
