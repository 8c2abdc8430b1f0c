"""The corrective, self-checking answer workflow (DESIGN.md section 2), one step per stage.

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
"""

from __future__ import annotations

import re
import time
from typing import Any

from llama_index.core.llms import ChatMessage
from llama_index.core.schema import NodeWithScore
from workflows import Workflow, step
from workflows.events import Event, StartEvent, StopEvent

from enterprise_rag.answer.checks.citations import cited_labels, says_nothing, states_not_found
from enterprise_rag.answer.checks.decision import DecisionResult, decide
from enterprise_rag.answer.checks.draft import review_draft
from enterprise_rag.answer.checks.grading import Grader
from enterprise_rag.answer.checks.support import UNKNOWN, verdict_from_check
from enterprise_rag.answer.outcome import Outcome
from enterprise_rag.answer.sources import corpus_sources, refine, relabel, web_sources
from enterprise_rag.answer.state import RunState
from enterprise_rag.config import RagSettings
from enterprise_rag.errors import LLMError, WebSearchError
from enterprise_rag.llm import prompts
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.llm.prompts import NOT_FOUND_ANSWER
from enterprise_rag.retrieval.transforms import Chat, standalone_question

FLAGGED_ANSWER = (
    "I could not produce an answer that the documents fully support, so this question has been flagged for "
    "review. Please check the cited sources directly."
)
_SMALLTALK = re.compile(r"^\s*(hi|hello|hey|thanks|thank you|good (morning|afternoon|evening))[\s!.]*$", re.I)


def _standalone_chat(caller: LLMCaller) -> Chat:
    def chat(messages: list[ChatMessage], max_tokens: int) -> str:
        return str(caller.call("grader", "standalone", messages, max_tokens=max_tokens))

    return chat


# ---- events ---------------------------------------------------------------------------------------------
class Retrieve(Event):
    query: str


class Graded(Event):
    query: str


class Rewrite(Event):
    reason: str


class WebFallback(Event):
    reason: str


class Refine(Event):
    pass


class Generate(Event):
    feedback: str = ""


class Drafted(Event):
    answer: str


class CitationsChecked(Event):
    answer: str


class AnswerWorkflow(Workflow):
    """One instance answers one question; dependencies come in through the constructor."""

    def __init__(self, *, deps: Any, state: RunState, caller: LLMCaller, settings: RagSettings) -> None:
        super().__init__(timeout=None)
        self.deps = deps  # WorkflowDeps: retriever factory, grader, embed model, web search, egress, recorder
        self.s = state
        self.caller = caller
        self.cfg = settings.workflow

    def _trace(self, name: str, t0: float, **data: Any) -> None:
        self.deps.recorder.step(name, data, (time.perf_counter() - t0) * 1000)

    def _done(self, answer: str, *, not_found: bool = False) -> StopEvent:
        self.s.answer = answer
        return StopEvent(
            result=Outcome.from_state(self.s, self.caller, not_found=not_found, web_cap=self.cfg.web_confidence_cap)
        )

    # -- 1. standalone rewrite and retrieval necessity
    @step
    async def prepare(self, ev: StartEvent) -> Retrieve | StopEvent:
        t0 = time.perf_counter()
        s = self.s
        if _SMALLTALK.match(s.question) and not s.history:
            s.retrieval_used = False
            self._trace("prepare", t0, needs_retrieval=False)
            return self._done("Hello! Ask me a question about your organisation's documents.")
        chat = _standalone_chat(self.caller)
        query, _ = await _to_thread(standalone_question, chat, s.question, s.history)
        s.query = query
        self._trace("prepare", t0, needs_retrieval=True, standalone_question=query)
        return Retrieve(query=query)

    # -- 2-4. hybrid retrieval, parent merging, rerank (inside the retriever)
    @step
    async def retrieve(self, ev: Retrieve) -> Graded:
        t0 = time.perf_counter()
        self.s.queries.append(ev.query)
        result = await self.deps.retrieve(self.s.principal, ev.query, self.cfg.top_k)
        for n in result.nodes:
            self.s.candidates.setdefault(n.node.node_id, n)
        self._trace("retrieve", t0, query=ev.query, results=result.trace.get("results"),
                    candidates=len(result.trace.get("candidates", [])), merged=result.trace.get("merged"),
                    expanded=result.trace.get("expanded"))  # fmt: skip
        return Graded(query=ev.query)

    # -- 5. relevance grading (batched, floored, cached, fail-open)
    @step
    async def grade(self, ev: Graded) -> Rewrite | WebFallback | Refine | StopEvent:
        t0 = time.perf_counter()
        s = self.s
        ungraded = [n for nid, n in s.candidates.items() if nid not in s.grades]
        if ungraded:
            grader: Grader = self.deps.grader(self.caller)
            for g in await _to_thread(grader.grade, s.answered, ungraded):
                s.grades[g.node_id] = g
        s.decision = decide(list(s.grades.values()), min_yes=self.cfg.min_yes)
        self._trace("grade", t0, grades=[g.to_dict() for g in s.grades.values()], decision=s.decision.decision,
                    reason=s.decision.reason, relevance=s.decision.relevance)  # fmt: skip
        return self._route()

    # -- 6. decision: proceed / augment / fallback, rewrites first
    def _route(self) -> Rewrite | WebFallback | Refine | StopEvent:
        s, d = self.s, self.s.decision
        assert d is not None
        if d.decision == "proceed":
            return Refine()
        if d.ambiguous and s.rewrites < self.cfg.max_query_rewrites:
            return Rewrite(reason=d.reason)
        if self.deps.egress_allows(s.principal):
            return WebFallback(reason=d.reason)
        if d.decision == "augment":
            return Refine()
        return self._done(NOT_FOUND_ANSWER, not_found=True)

    @step
    async def rewrite(self, ev: Rewrite) -> Retrieve:
        t0 = time.perf_counter()
        self.s.rewrites += 1
        try:
            reply = await self.caller.acall("grader", "rewrite", prompts.rewrite_messages(self.s.query, self.s.queries),
                                            max_tokens=64)  # fmt: skip
            query = next((ln.strip().strip('"') for ln in str(reply).splitlines() if ln.strip()), self.s.query)
        except LLMError:
            query = self.s.query
        self._trace("rewrite", t0, reason=ev.reason, query=query, attempt=self.s.rewrites)
        return Retrieve(query=query)

    # -- 7. guarded web fallback (egress policy checked again here)
    @step
    async def web(self, ev: WebFallback) -> Refine | StopEvent:
        t0 = time.perf_counter()
        s = self.s
        if not self.deps.egress_allows(s.principal):
            return self._done(NOT_FOUND_ANSWER, not_found=True)
        phrasings = [s.query]
        if s.decision is not None and s.decision.decision == "fallback" and self.cfg.web_phrasings > 1:
            phrasings += await _to_thread(self.deps.expand, self.caller, s.query, self.cfg.web_phrasings - 1)
        error = None
        try:
            results = await _to_thread(self.deps.web_search, phrasings)
        except WebSearchError as exc:  # a web outage must not fail the query: go on with the corpus
            error, results = str(exc), []
        s.web_used = bool(results)
        self._trace("web", t0, reason=ev.reason, phrasings=phrasings, results=[r.url for r in results], error=error)
        if not results and not self._kept_nodes():
            return self._done(NOT_FOUND_ANSWER, not_found=True)
        s.sources = web_sources(results, 1)
        return Refine()

    def _kept_nodes(self) -> list[NodeWithScore]:
        """Passages for the generator, best retrieval score first: on proceed those graded yes or partial
        (a small grader often calls the answering passage partial and a neighbour yes); otherwise the
        partial and ungraded ones."""
        s = self.s
        proceed = s.decision is not None and s.decision.decision == "proceed"
        wanted = {"yes", "partial"} if proceed else {"partial", "ungraded"}
        ranked = sorted(s.candidates.values(), key=lambda n: -(n.score or 0.0))
        kept = [n for n in ranked if n.node.node_id in s.grades and s.grades[n.node.node_id].grade in wanted]
        return kept[: self.cfg.max_sources]

    # -- 8. context refinement
    @step
    async def refine(self, ev: Refine) -> Generate | Rewrite | WebFallback | StopEvent:
        t0 = time.perf_counter()
        s = self.s
        kept = self._kept_nodes()
        corpus = corpus_sources(kept)
        web = [src for src in s.sources if src.kind == "web"]
        sources = relabel(corpus + web)
        if not sources:
            return self._done(NOT_FOUND_ANSWER, not_found=True)
        s.basis = frozenset([n.node.node_id for n in kept] + [w.source for w in web])
        if s.basis in s.not_found_from:  # a rewrite found nothing new: the same sources hold no answer
            self._trace("refine", t0, skipped="same sources as a draft that found no answer")
            return self._generator_found_nothing()
        s.sources, dropped = await _to_thread(refine, s.question, sources, self.deps.embed_model, self.cfg.refine_floor)
        self._trace(
            "refine", t0, sources=[(x.label, x.source, x.page, x.kind) for x in s.sources], strips_dropped=dropped
        )
        return Generate()

    # -- 9. generation (and revisions, which share the same prefix)
    @step
    async def generate(self, ev: Generate) -> Drafted:
        t0 = time.perf_counter()
        s = self.s
        if ev.feedback:
            name, messages = "revise", prompts.revise_messages(s.sources, s.answered, s.answer, ev.feedback)
        else:
            name = "reconsider" if s.second_opinion else "generate"
            messages = prompts.generate_messages(s.sources, s.answered, answer_known=s.second_opinion)
        try:
            reply = await self.caller.acall("generator", name, messages, max_tokens=self.cfg.answer_max_tokens)
        except LLMError:
            if not s.second_opinion:
                raise
            reply = NOT_FOUND_ANSWER  # the second opinion is optional: if it fails, the first verdict stands
        answer = str(reply).strip()
        s.answer = answer
        self._trace("generate", t0, revision=bool(ev.feedback), second_opinion=s.second_opinion, feedback=ev.feedback,
                    answer=answer)  # fmt: skip
        return Drafted(answer=answer)

    # -- 10. citation check in code
    @step
    async def citations(self, ev: Drafted) -> Generate | CitationsChecked | Rewrite | WebFallback | StopEvent:
        t0 = time.perf_counter()
        s = self.s
        if (states_not_found(ev.answer) and not cited_labels(ev.answer)) or says_nothing(ev.answer):  # labels only
            if self._second_opinion_due():
                s.second_opinion = s.second_opinion_asked = True
                self._trace(
                    "citations", t0, not_found=True, second_opinion="asked: the grader judged a passage relevant"
                )
                return Generate()
            # The generator is the last relevance judge: no answer in the kept sources is a fallback.
            self._trace("citations", t0, not_found=True)
            return self._generator_found_nothing()
        rephrased = s.question if s.history else s.query  # its words, too, may be repeated without a source
        sources = {x.label: x.text for x in s.sources}
        review = review_draft(ev.answer, sources, s.answered, second_opinion=s.second_opinion, rephrased=rephrased)
        s.answer = review.answer
        self._trace("citations", t0, **review.to_trace())
        if s.second_opinion and not review.fit_as_second_opinion:
            return self._generator_found_nothing()  # a second opinion is never revised: the first verdict stands
        if review.needs_revision and s.citation_revisions < self.cfg.max_citation_revisions:
            s.citation_revisions += 1
            return Generate(feedback=review.feedback())
        return CitationsChecked(answer=review.answer)

    def _second_opinion_due(self) -> bool:
        """The generator found nothing, but the grader judged a kept passage relevant (yes or partial)."""
        s = self.s
        if not self.cfg.second_opinion or s.second_opinion_asked:
            return False
        grades = [s.grades.get(x.node_id) for x in s.sources if x.kind == "corpus"]
        return any(g is not None and g.grade in ("yes", "partial") for g in grades)

    def _generator_found_nothing(self) -> Rewrite | WebFallback | StopEvent:
        s = self.s
        s.second_opinion = False
        if s.basis not in s.not_found_from:
            s.not_found_from.append(s.basis)
        s.decision = DecisionResult("fallback", True, min(s.decision.relevance if s.decision else 0.0, 0.3),
                                    "the generator found no answer in the kept sources")  # fmt: skip
        if s.rewrites < self.cfg.max_query_rewrites:
            return Rewrite(reason=s.decision.reason)
        if self.deps.egress_allows(s.principal) and not s.web_used:
            return WebFallback(reason=s.decision.reason)
        return self._done(NOT_FOUND_ANSWER, not_found=True)

    # -- 11-12. support (claim level) and usefulness, one grader call sharing the generation prefix
    @step
    async def check(self, ev: CitationsChecked) -> Generate | Rewrite | WebFallback | StopEvent:
        t0 = time.perf_counter()
        s = self.s
        try:
            reply = await self.caller.acall(
                "grader",
                "check",
                prompts.check_messages(s.sources, s.answered, ev.answer, answer_known=s.second_opinion),
                max_tokens=self.cfg.check_max_tokens,
                schema=prompts.CHECK_SCHEMA,
            )
            s.verdict = verdict_from_check(reply)
        except LLMError:
            s.verdict = UNKNOWN  # fail-closed: an unchecked answer is never reported as supported
        threshold = self.cfg.web_support_threshold if s.web_used else self.cfg.support_threshold
        self._trace("check", t0, support=s.verdict.to_support_dict(), usefulness=s.verdict.to_usefulness_dict(),
                    threshold=threshold)  # fmt: skip
        if s.second_opinion and not (s.verdict.passed(threshold) and s.verdict.answers_question):
            return self._generator_found_nothing()
        if not s.verdict.passed(threshold):
            if s.verdict.label != "unknown" and s.hallucination_retries < self.cfg.max_hallucination_retries:
                s.hallucination_retries += 1
                claims = "\n".join(f"- Not supported by the sources: {c}" for c in s.verdict.unsupported_claims)
                return Generate(feedback=claims or "Some statements are not supported by the sources.")
            s.flagged = True
            return self._done(FLAGGED_ANSWER)
        if not s.verdict.answers_question and s.usefulness_retries < self.cfg.max_usefulness_retries:
            s.usefulness_retries += 1
            return Rewrite(reason="the answer does not address the question")
        return self._done(ev.answer)


async def _to_thread(fn: Any, *args: Any) -> Any:
    import asyncio

    return await asyncio.to_thread(fn, *args)
