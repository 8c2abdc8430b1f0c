"""From the finished run state to the public :class:`QueryResult` payload."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from enterprise_rag.answer.checks.draft import Draft
from enterprise_rag.answer.checks.support import NOT_APPLICABLE
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.schema.documents import heading_path_at
from enterprise_rag.schema.result import Citation, QueryResult

if TYPE_CHECKING:
    from enterprise_rag.answer.state import RunState
    from enterprise_rag.schema.sources import Source


# correction.decision scores a passage graded yes 1.0 (relevance >= 0.7) and partial / ungraded 0.5
# (relevance <= 0.5): below 0.7 no corpus passage answered the question.
WEAK_CORPUS_BELOW = 0.7


def confidence(
    retrieval_relevance: float,
    support_score: float,
    usefulness_score: float,
    *,
    web_sources: int,
    corpus_sources: int,
    flagged: bool,
    not_found: bool,
    web_cap: float,
) -> float:
    """Combine the three signals; never high when the answer rests on the web while the corpus was weak."""
    if not_found:
        return round(0.5 * usefulness_score * (1.0 - retrieval_relevance), 3)
    value = 0.4 * retrieval_relevance + 0.4 * support_score + 0.2 * usefulness_score
    if web_sources and (corpus_sources == 0 or retrieval_relevance < WEAK_CORPUS_BELOW):
        value = min(value, web_cap)
    if flagged:
        value = min(value, 0.2)
    return round(value, 3)


def citations_for(draft: Draft | None, sources: list[Source]) -> list[Citation]:
    """One citation per cited source, in order of first use, with the first verified quote from it."""
    by_label = {s.label: s for s in sources}
    quotes: dict[str, str] = {}
    for sentence in draft.cited if draft else ():
        for quote in sentence.quotes:
            quotes.setdefault(quote.label, quote.text)
    return [
        Citation(
            label, src.source, src.page, src.document_id, quote, src.kind, section_of(src, quote), src.relative_source
        )
        for label, quote in quotes.items()
        if (src := by_label.get(label)) is not None
    ]


def section_of(src: Source, quote: str) -> str:
    """Where in its document the quote sits: the source's headings below the document title, and those its
    text writes inline before the quote (a merged parent spans sections)."""
    if src.kind != "corpus":
        return ""
    crumbs = tuple(src.breadcrumb.split(" > ")) if src.breadcrumb else ()
    common = crumbs[1:] if crumbs[:1] == (src.title,) else crumbs
    at = src.text.find(quote) if quote else -1
    return " > ".join(heading_path_at(src.text, common, at + len(quote) if at >= 0 else 0))


def source_record(src: Source) -> dict[str, Any]:
    """A numbered source as plain data, text included, so callers can rebuild the passages that were cited."""
    return {
        "label": src.label, "kind": src.kind, "source": src.source, "page": src.page, "node_id": src.node_id,
        "document_id": src.document_id, "title": src.title, "breadcrumb": src.breadcrumb,
        "effective_date": src.effective_date, "status": src.status, "text": src.text,
    }  # fmt: skip


class Outcome:
    """Builds the result object of a finished run."""

    @staticmethod
    def from_state(state: RunState, caller: LLMCaller, *, not_found: bool, web_cap: float) -> QueryResult:
        s = state
        citations = [] if not_found or s.flagged else citations_for(s.draft, s.sources)
        corpus = sum(1 for c in citations if c.kind == "corpus")
        web = sum(1 for c in citations if c.kind == "web")
        relevance = s.decision.relevance if s.decision else 0.0
        verdict = s.verdict if not not_found else NOT_APPLICABLE
        usefulness: dict[str, Any] = {"label": "not_found", "score": 0.5} if not_found else (
            s.usefulness.to_dict() if s.usefulness else {"label": "unknown", "score": 0.0}
        )  # fmt: skip
        draft = None if not_found or s.flagged else s.draft
        conf = confidence(
            relevance, verdict.score, usefulness["score"], web_sources=web, corpus_sources=corpus,
            flagged=s.flagged, not_found=not_found, web_cap=web_cap,
        )  # fmt: skip
        stats = caller.stats
        return QueryResult(
            answer=s.answer,
            citations=citations,
            evaluation={
                "confidence": conf,
                "retrieval_relevance": relevance,
                "support": verdict.to_support_dict(),
                "usefulness": usefulness,
                "sources": {"corpus": corpus, "web": web},
            },
            pipeline={
                "retrieval_used": s.retrieval_used,
                "decision": s.decision.decision if s.decision else ("proceed" if not s.retrieval_used else "fallback"),
                "query_rewrites": s.rewrites,
                "web_search_used": s.web_used,
                "hallucination_retries": s.revisions,
                "usefulness_retries": 0,  # usefulness is read from the evidence: nothing to rerun
                "flagged_for_review": s.flagged,
                "not_found": not_found,
                "partial": bool(draft and draft.partial),
                "quoted": bool(draft and draft.quoted),
                "missing_parts": list(draft.missing) if draft else [],
                "llm_calls": stats.calls,
                "llm_calls_replayed": stats.replayed,
                "prompt_tokens": stats.prompt_tokens,
                "cached_tokens": stats.cached_tokens,
                "completion_tokens": stats.completion_tokens,
                "latency_ms": 0,
            },
            trace_id="",
            sources=[source_record(x) for x in s.sources],
        )
