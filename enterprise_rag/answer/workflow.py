"""The corrective, self-checking answer workflow, one step per stage.

prepare -> retrieve -> grade -> decide -> (rewrite -> retrieve ...)* -> [web] -> refine
-> select -> screen -> generate -> verify -> (revise -> verify)? -> finish -> (rerun)?

Evidence first. The graded passages decide whether the question is answerable: when a passage clears
the grader model's calibrated "yes" threshold the evidence is strong, and from then on no step is
offered a refusal. The model then chooses, part by part of the question, the numbered spans of the
sources that state the answer (a choice constrained to real span numbers; with strong evidence and
one part, at least one), and writes the answer from those spans alone, every sentence naming the
spans it rests on; a chosen paragraph the grader model finds written to an AI model rather than to
its readers is set aside first (:mod:`~enterprise_rag.answer.checks.addressee`). Each sentence is
verified in code against its spans (numbers, units, months, codes, addresses) and judged by the
model's calibrated p(yes) that its spans state it. Verified sentences accumulate: one revision may
replace the failed ones, never a verified one. What stays unverified is dropped and the answer is
marked partial; a question part with no verified sentence is quoted from its chosen spans (strong
evidence) or named as missing. On weak evidence the answer is then put to the grader as a line of its
own: what verified must also state the answer, at the calibrated "yes" threshold (a copied neighbouring
line verifies, and answers nothing). "Not found" is what remains when no span is chosen or, on weak
evidence, nothing verifies or what verified does not state the answer; no reply text decides it.

Every loop has a cap; every step writes what it did into the trace. Grading and the usefulness check
fail open; the support judge fails closed (the answer is flagged for review).

One :class:`AnswerWorkflow` serves every query, concurrent ones included: what
a run knows lives in its ``Context`` (:class:`~enterprise_rag.answer.state.RunState`),
its collaborators come in its :class:`~enterprise_rag.answer.events.Ask` event,
and the instance holds only the dependencies it was built with.
"""

from __future__ import annotations

import asyncio

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeWithScore
from workflows import Context, Workflow, step
from workflows.events import StopEvent

from enterprise_rag.answer.assembly import assemble
from enterprise_rag.answer.checks.decision import DecisionResult, decide
from enterprise_rag.answer.checks.draft import Draft, Sentence, draft_text
from enterprise_rag.answer.checks.grading import Grade
from enterprise_rag.answer.checks.parts import question_parts
from enterprise_rag.answer.checks.support import Judge, usefulness, verdict
from enterprise_rag.answer.checks.verification import check_values, copies_its_spans, states_nothing
from enterprise_rag.answer.compensations import AVAILABLE, QUESTION_CODES, unnamed_question_codes
from enterprise_rag.answer.dependencies import EgressCheck, GraderFactory, ScreenFactory
from enterprise_rag.answer.events import (
    Ask,
    Drafted,
    Drafting,
    Generate,
    Graded,
    Retrieve,
    Retrieved,
    Rewrite,
    Verified,
    WebFallback,
)
from enterprise_rag.answer.outcome import Outcome
from enterprise_rag.answer.selection import select
from enterprise_rag.answer.sources import corpus_sources, evidence_of, refine, relabel, web_sources
from enterprise_rag.answer.state import RunState
from enterprise_rag.answer.steps import begin_step, record_step
from enterprise_rag.answer.web import WebSearch, search_all
from enterprise_rag.config import WorkflowSettings
from enterprise_rag.errors import ConfigError, LLMError, WebSearchError
from enterprise_rag.llm import prompts
from enterprise_rag.llm.prompts import NOT_FOUND_ANSWER
from enterprise_rag.llm.untrusted import addresses_model
from enterprise_rag.retrieval.retriever import Retriever
from enterprise_rag.retrieval.transforms import concatenated_query, more_phrasings, rewrite_query, standalone_question
from enterprise_rag.schema.sources import Source

FLAGGED_ANSWER = (
    "I could not produce an answer that the documents fully support, so this question has been flagged for "
    "review. Please check the cited sources directly."
)


class AnswerWorkflow(Workflow):
    """Answers :class:`Ask` events; dependencies come in through the constructor, per-run ones in the event."""

    def __init__(
        self,
        *,
        retriever: Retriever,
        grader: GraderFactory,
        screen: ScreenFactory,
        embed_model: BaseEmbedding,
        egress_allows: EgressCheck,
        web_search: WebSearch,
        settings: WorkflowSettings,
    ) -> None:
        super().__init__(timeout=None)
        unknown = sorted(set(settings.compensations) - set(AVAILABLE))
        if unknown:
            raise ConfigError(f"workflow.compensations: unknown {', '.join(unknown)} (known: {', '.join(AVAILABLE)})")
        self._retriever = retriever
        self._grader = grader
        self._screen = screen
        self._embed_model = embed_model
        self._egress_allows = egress_allows
        self._web_search = web_search
        self._cfg = settings
        self._aids = frozenset(settings.compensations)

    def _done(self, s: RunState, answer: str, *, not_found: bool = False) -> StopEvent:
        s.answer = answer
        return StopEvent(
            result=Outcome.from_state(s, s.run.caller, not_found=not_found, web_cap=self._cfg.web_confidence_cap)
        )

    def _judge(self, s: RunState) -> Judge:
        caller = s.run.caller
        threshold = self._cfg.support_threshold_for(caller.model_id("grader"))
        if s.web_used:
            threshold = min(1.0, threshold + self._cfg.web_support_margin)
        return Judge(caller, support_threshold=threshold)

    # -- 1. standalone rewrite
    @step
    async def prepare(self, ctx: Context[RunState], ev: Ask) -> Retrieve:
        t0 = begin_step(ctx, "prepare")
        async with ctx.store.edit_state() as s:
            s.ask = ev
            s.query, _ = await asyncio.to_thread(standalone_question, ev.caller, ev.question, ev.history)
            record_step(ctx, s, "prepare", t0, needs_retrieval=True, standalone_question=s.query)
            return Retrieve(query=s.query)

    # -- 2-4. hybrid retrieval, parent merging, rerank (inside the retriever)
    @step
    async def retrieve(self, ctx: Context[RunState], ev: Retrieve) -> Retrieved:
        t0 = begin_step(ctx, "retrieve")
        async with ctx.store.edit_state() as s:
            s.queries.append(ev.query)
            result = await self._retriever.aretrieve(ev.query, s.run.principal)
            s.run.recorder.documents({str(n.node.metadata.get("document_id", "")) for n in result.nodes} - {""})
            new = []
            for n in result.nodes:
                if n.node.node_id not in s.candidates:
                    s.candidates[n.node.node_id] = n
                    new.append(n)
            record_step(ctx, s, "retrieve", t0, query=ev.query, results=result.trace.get("results"),
                    candidates=len(result.trace.get("candidates", [])), merged=result.trace.get("merged"),
                    expanded=result.trace.get("expanded"))  # fmt: skip
            return Retrieved(passages=new)

    # -- 5. evidence grading: the best lines of the question's sources, each judged by p(yes)
    @step
    async def grade(self, ctx: Context[RunState], ev: Retrieved) -> Graded:
        t0 = begin_step(ctx, "grade")
        async with ctx.store.edit_state() as s:
            grader = self._grader(s.run.caller)
            rejected, _ = grader.under_floor(ev.passages)
            s.grades.update((g.node_id, g) for g in rejected)
            passages = self._passages(s)
            s.basis = frozenset([n.node.node_id for n in passages] + [w.source for w in s.web])
            sources, dropped = await asyncio.to_thread(self._sources, s, passages, s.web)
            units = await asyncio.to_thread(evidence_of, s.answered, sources, self._embed_model,
                                            self._cfg.evidence_units)  # fmt: skip
            graded = await asyncio.to_thread(grader.grade_units, s.answered, sources, units)
            s.grades.update((g.node_id, g) for g in grader.passage_grades(sources, units, graded))
            s.sources, s.evidence = sources, list(zip(units, graded, strict=True))
            d = decide(graded, min_yes=self._cfg.min_yes)
            if not s.web_used:  # the payload's decision and relevance are the corpus's: the web is its fallback
                s.decision = d
            kept = {g.node_id for g in s.grades.values() if g.evidence}
            planted = {x.source for x in corpus_sources(passages) + s.web
                       if x.node_id in kept and addresses_model(x.text)}  # fmt: skip
            record_step(ctx, s, "grade", t0, sources=[(x.label, x.source, x.page, x.kind) for x in sources],
                    grades=[g.to_dict() for g in s.grades.values()], strips_dropped=dropped,
                    evidence=[(u.text[:200], g.grade, round(g.confidence, 3), g.method) for u, g in s.evidence],
                    decision=d.decision, reason=d.reason, relevance=d.relevance,
                    addresses_model=sorted(planted))  # fmt: skip
            return Graded(decision=d)

    def _passages(self, s: RunState) -> list[NodeWithScore]:
        """The best ``max_sources`` candidates by retrieval score that no grade has rejected."""
        ranked = sorted(s.candidates.values(), key=lambda n: -(n.score or 0.0))
        kept = [n for n in ranked if n.node.node_id not in s.grades or s.grades[n.node.node_id].grade != "no"]
        return kept[: self._cfg.max_sources]

    def _sources(self, s: RunState, nodes: list[NodeWithScore], web: list[Source]) -> tuple[list[Source], int]:
        """The numbered, refined sources of ``nodes`` (best retrieval score first) and ``web``: the prefix that
        grading and generation share, and the strips refinement dropped."""
        return refine(s.answered, relabel(corpus_sources(nodes) + web), self._embed_model, self._cfg.refine_floor)

    # -- 6. decision: proceed / augment / fallback, rewrites first
    @step
    async def route(self, ctx: Context[RunState], ev: Graded) -> Generate | Rewrite | WebFallback | StopEvent:
        d = ev.decision
        async with ctx.store.edit_state() as s:
            if QUESTION_CODES in self._aids:
                unnamed = unnamed_question_codes(s.answered, [x.text for x in s.sources])
                if unnamed:
                    s.run.recorder.step("route", {"unnamed_codes": unnamed}, 0.0)
                    return self._found_nothing(s, f"no source names {', '.join(unnamed)}")
            if s.basis in s.not_found_from:  # the same sources as a round that verified nothing
                return self._found_nothing(s, "the same sources as a round that found no answer")
            if d.decision == "proceed":
                return await self._generate(ctx, s, strong=True)
            if d.ambiguous and s.rewrites < self._cfg.max_query_rewrites:
                return Rewrite(reason=d.reason)
            if self._egress_allows(s.run.principal) and not s.web_tried:
                return WebFallback(reason=d.reason)
            if d.decision == "augment":
                return await self._generate(ctx, s, strong=False)
            return self._done(s, NOT_FOUND_ANSWER, not_found=True)

    async def _generate(
        self, ctx: Context[RunState], s: RunState, *, strong: bool
    ) -> Generate | Rewrite | WebFallback | StopEvent:
        """Write from the evidence :func:`~enterprise_rag.answer.selection.select` keeps: the best-graded units,
        less those whose paragraph is written to an AI model. Strong only while the best unit kept is a yes."""
        s.parts = question_parts(s.answered)
        t0 = begin_step(ctx, "screen")
        kept = await asyncio.to_thread(select, s.evidence, s.sources, self._screen(s.run.caller),
                                       margin=self._cfg.evidence_margin, limit=self._cfg.max_evidence)  # fmt: skip
        s.strong = strong and kept.strong
        s.chosen, s.set_aside = kept.chosen, kept.set_aside
        record_step(ctx, s, "screen", t0, paragraphs=[(text[:200], score) for text, score in kept.screened],
                set_aside=[sp.tag for sp in s.set_aside])  # fmt: skip  (texts cut as the grade step cuts them)
        if not kept.spans:
            return self._found_nothing(s, "every chosen paragraph is written to an AI model")
        return Generate(spans=kept.spans)

    @step
    async def rewrite(self, ctx: Context[RunState], ev: Rewrite) -> Retrieve:
        t0 = begin_step(ctx, "rewrite")
        async with ctx.store.edit_state() as s:
            s.rewrites += 1
            try:
                query = await asyncio.to_thread(rewrite_query, s.run.caller, s.query, s.queries) or s.query
            except LLMError:
                query = s.query
            record_step(ctx, s, "rewrite", t0, reason=ev.reason, query=query, attempt=s.rewrites)
            return Retrieve(query=query)

    # -- 7. guarded web fallback (egress policy checked again here)
    @step
    async def web(self, ctx: Context[RunState], ev: WebFallback) -> Retrieved | StopEvent:
        t0 = begin_step(ctx, "web")
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
            s.web_tried, s.web_used = True, bool(results)
            record_step(ctx, s, "web", t0, reason=ev.reason, phrasings=phrasings, results=[r.url for r in results],
                    error=error)  # fmt: skip
            if not results and not self._passages(s):
                return self._done(s, NOT_FOUND_ANSWER, not_found=True)
            s.web = web_sources(results, 1)
            return Retrieved(passages=[])

    # -- 9b. generation from the chosen spans alone (and one revision of the sentences that failed)
    @step
    async def generate(self, ctx: Context[RunState], ev: Generate) -> Drafted:
        t0 = begin_step(ctx, "generate")
        async with ctx.store.edit_state() as s:
            if ev.failed:
                name, messages = "revise", prompts.revise_messages(s.sources, s.answered, ev.spans, ev.failed)
            else:
                name, messages = "generate", prompts.answer_messages(s.sources, s.answered, ev.spans)
            loop = asyncio.get_running_loop()
            written: list[str] = []
            shown = 0

            def drafted(piece: str) -> None:  # from the caller's thread: the new text of the sentences, to the loop
                nonlocal shown
                written.append(piece)
                text = draft_text("".join(written))
                if len(text) > shown:
                    loop.call_soon_threadsafe(ctx.write_event_to_stream, Drafting(text=text[shown:]))
                    shown = len(text)

            reply = await s.run.caller.acall("generator", name, messages, max_tokens=self._cfg.answer_max_tokens,
                                             schema=prompts.answer_schema([x.tag for x in ev.spans]),
                                             on_text=drafted)  # fmt: skip
            draft = Draft.from_reply(reply, ev.spans)
            record_step(ctx, s, "generate", t0, revision=bool(ev.failed),
                    sentences=[(x.text, [sp.tag for sp in x.spans]) for x in draft.sentences])  # fmt: skip
            return Drafted(draft=draft, spans=ev.spans)

    # -- 10-11. each new sentence verified in code against its spans, then judged by the model
    @step
    async def verify(self, ctx: Context[RunState], ev: Drafted) -> Generate | Verified | StopEvent:
        t0 = begin_step(ctx, "verify")
        async with ctx.store.edit_state() as s:
            judge = self._judge(s)
            asked = f"{s.answered}\n{s.run.question}"  # the user's own figures may be repeated
            known = {x.text for x in s.verified}
            failed: list[tuple[Sentence, str]] = []
            judged: list[tuple[str, float | None, str]] = []
            for sentence in ev.draft.sentences:
                if sentence.text in known:
                    continue
                if states_nothing(sentence.text):
                    s.verified.append(sentence)  # a connecting line: kept only with verified sentences after it
                    continue
                finding = check_values(sentence, asked, self._cfg.link_allow_list)
                if not finding.passed:
                    failed.append((sentence, "; ".join(finding.reasons)))
                    judged.append((sentence.text, None, failed[-1][1]))
                    continue
                if copies_its_spans(sentence):
                    s.verified.append(sentence)
                    known.add(sentence.text)
                    judged.append((sentence.text, 1.0, "copies its line"))
                    continue
                try:
                    p = await asyncio.to_thread(judge.support, s.sources, sentence)
                except LLMError as exc:  # fail-closed: an unjudged claim is never reported as supported
                    record_step(ctx, s, "verify", t0, judged=judged, error=str(exc))
                    s.flagged = True
                    return self._done(s, FLAGGED_ANSWER)
                judged.append((sentence.text, round(p, 3), ""))
                if judge.supported(p):
                    s.verified.append(sentence)
                    known.add(sentence.text)
                else:
                    failed.append((sentence, "its lines do not state this"))
            record_step(ctx, s, "verify", t0, judged=judged, revision=s.revisions)
            if failed and s.revisions < self._cfg.max_revisions:
                s.revisions += 1
                return Generate(spans=[x.spans[0] for x, _ in failed], failed=[(x.text, why) for x, why in failed])
            s.dropped += [x for x, _ in failed]
            return Verified()

    # -- 12-13. the answer assembled from what verified
    @step
    async def finish(self, ctx: Context[RunState], ev: Verified) -> Rewrite | WebFallback | StopEvent:
        t0 = begin_step(ctx, "finish")
        async with ctx.store.edit_state() as s:
            fallback = [sp for u in s.chosen for sp in u.spans if sp not in s.set_aside] if s.strong else []
            draft = assemble(s.verified, s.dropped, fallback, s.parts)
            if draft is None:
                record_step(ctx, s, "finish", t0, verified=0, dropped=[x.text for x in s.dropped])
                return self._found_nothing(s, "no sentence written from the evidence verified")
            answered = len(s.parts) - len(draft.missing)
            best = max((g.confidence for u, g in s.evidence if u in s.chosen), default=0.0)
            grade = await asyncio.to_thread(self._answer_grade, s, draft)
            if grade is not None and grade.grade not in ("yes", "ungraded"):
                record_step(ctx, s, "finish", t0, verified=len(draft.sentences), answer_grade=grade.to_dict(),
                        withheld=draft.render())  # fmt: skip
                return self._found_nothing(s, "on weak evidence, what verified does not state the answer")
            if grade is not None:
                best = max(best, grade.confidence)
            s.usefulness = usefulness(len(s.parts), answered, best)
            s.verdict = verdict(sum(1 for x in draft.sentences if not states_nothing(x.text)),
                                [x.text for x in s.dropped])  # the model's claims, quoted lines aside
            record_step(ctx, s, "finish", t0, verified=len(draft.sentences), dropped=list(draft.dropped),
                    quoted=len(draft.quotes), missing=list(draft.missing), support=s.verdict.to_support_dict(),
                    usefulness=s.usefulness.to_dict(), answer_grade=grade and grade.to_dict())  # fmt: skip
            s.draft = draft
            return self._done(s, draft.render())

    def _answer_grade(self, s: RunState, draft: Draft) -> Grade | None:
        """On weak evidence, the grader's judgement of what verified, put to it as a line: does it state the
        answer? A verified line need not answer (a neighbouring fact copies its span). None on strong evidence,
        and when the evidence is ungraded (a grading outage: fail-open, as grading is)."""
        if s.strong or all(g.grade == "ungraded" for u, g in s.evidence if u in s.chosen):
            return None
        text = "\n".join(x.text for x in draft.cited if not states_nothing(x.text))
        return self._grader(s.run.caller).grade_texts(s.answered, s.sources, [text])[0]

    def _found_nothing(self, s: RunState, reason: str) -> Rewrite | WebFallback | StopEvent:
        """No answer in the current sources: rewrite and retrieve again, then the web, then not found."""
        if s.basis not in s.not_found_from:
            s.not_found_from.append(s.basis)
        s.verified, s.dropped, s.revisions = [], [], 0
        s.decision = DecisionResult("fallback", True, min(s.decision.relevance if s.decision else 0.0, 0.3), reason)
        if s.rewrites < self._cfg.max_query_rewrites:
            return Rewrite(reason=reason)
        if self._egress_allows(s.run.principal) and not s.web_tried:
            return WebFallback(reason=reason)
        return self._done(s, NOT_FOUND_ANSWER, not_found=True)
