"""Notebook display: results render as HTML tables, untrusted text is escaped, the containers stay plain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_index.core.schema import NodeWithScore, TextNode

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.answer.streaming import StreamEvent
from enterprise_rag.schema.display import retrieval_html, show_live
from enterprise_rag.schema.ingest import FailedFile, IngestReport
from enterprise_rag.schema.result import Citation, QueryResult, RetrievedNodes, Trace
from enterprise_rag.store.traces import TraceStore

SCRIPT = "<script>alert('owned')</script>"
ESCAPED = "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;"
DANA = Principal(user_id="dana", groups=["hr"])


def _result(flagged: bool) -> QueryResult:
    return QueryResult(
        answer=f"Refunds take 14 days [S1]. {SCRIPT}",
        citations=[Citation("S1", "docs/refunds.md", 3, "doc-1", f"within 14 days {SCRIPT}")],
        evaluation={
            "confidence": 0.84,
            "support": {"label": "fully_supported", "score": 1.0, "unsupported_claims": []},
            "sources": {"corpus": 1, "web": 0},
        },
        pipeline={"decision": "proceed", "flagged_for_review": flagged, "llm_calls": 4},
        trace_id="t-123",
    )


def test_query_result_html_shows_answer_citations_and_tables_escaped() -> None:
    html = _result(flagged=False)._repr_html_()
    assert "<script>" not in html
    assert html.count(ESCAPED) == 2  # in the answer and in the quote
    assert "docs/refunds.md" in html and "<td" in html
    assert "support.label" in html and "fully_supported" in html
    assert "sources.web" in html and "decision" in html and "t-123" in html
    assert "Flagged for review" not in html


def test_flagged_query_result_shows_a_warning() -> None:
    result = _result(flagged=True)
    assert "Flagged for review" in result._repr_html_()
    assert "FLAGGED FOR REVIEW" in _pretty(result)


def test_ingest_report_lists_documents_and_failures_with_reasons() -> None:
    report = IngestReport(
        added=["a.md"], unchanged=["b.md"], failed=[FailedFile("bad<1>.pdf", f"no ACL {SCRIPT}")], nodes_written=7
    )
    html = report._repr_html_()
    assert "<script>" not in html and ESCAPED in html
    assert "bad&lt;1&gt;.pdf" in html and "1 document(s) failed" in html
    assert "a.md" in html and "b.md" in html
    assert "failed: bad<1>.pdf" in _pretty(report)


def test_a_large_ingest_lists_the_first_documents_then_a_count() -> None:
    report = IngestReport(
        added=[f"beir/{i}" for i in range(400)], failed=[FailedFile(f"f{i}.md", "x") for i in range(40)]
    )
    html = report._repr_html_()
    assert "beir/29<" in html and "beir/30<" not in html and "… and 370 more" in html
    assert "f39.md" in html  # every failure is listed


def test_retrieval_html_of_a_hand_built_list() -> None:
    node = TextNode(text="x" * 1000, metadata={"source": "s.md", "page": 2, "title": "T", "status": "current"})
    html = retrieval_html([NodeWithScore(node=node, score=0.5)])
    assert "0.5000" in html and "s.md" in html and "current" in html
    assert "x" * 299 + "…<" in html and "x" * 300 not in html  # the excerpt is cut


def test_retrieve_returns_a_real_list_that_renders_escaped(rag: EnterpriseRAG, tmp_path: Path) -> None:
    doc = tmp_path / "xss.md"
    doc.write_text(
        "---\ntitle: Refund <b>policy</b>\nallowed_groups: [hr]\n---\n"
        f"# Refunds\n\nRefunds are paid within 14 days of the request. {SCRIPT}\n"
    )
    assert rag.ingest(doc).ok
    nodes = rag.retrieve("How fast are refunds paid?", user=DANA, top_k=3)
    assert isinstance(nodes, list) and isinstance(nodes, RetrievedNodes)
    assert nodes and all(isinstance(n, NodeWithScore) for n in nodes)
    html = nodes._repr_html_()
    assert "<script>" not in html and "<b>" not in html
    assert "&lt;script&gt;" in html and "xss.md" in html
    assert "1. " in _pretty(nodes)
    assert (
        rag.retrieve("How fast are refunds paid?", user=Principal("eve", ["sales"]))
        ._repr_html_()
        .startswith("<p>no passages")
    )


def test_trace_is_a_dict_that_renders_steps_grades_and_calls(rag: EnterpriseRAG) -> None:
    store = TraceStore(rag.db)
    store.start("tr-1", DANA, f"why {SCRIPT}?", [])
    store.record_step("tr-1", 1, "retrieve", {"query": "why?", "results": [["node-a", 0.03279]]}, 12.5)
    grade = {"node_id": "node-a", "grade": "no", "reason": SCRIPT, "confidence": 0.9, "method": "llm"}
    store.record_step("tr-1", 2, "grade", {"grades": [grade], "decision": "fallback", "relevance": 0.0}, 1500.0)
    store.record_step("tr-1", 3, "rewrite", {"reason": "no relevant passage", "query": "why?", "attempt": 1}, 800.0)
    store.record_call(
        "tr-1",
        {"key": "k1", "seq": 1, "name": "grade", "role": "grader", "model": "qwen", "messages": [],
         "response": "{}", "prompt_tokens": 300, "completion_tokens": 20, "ms": 1400.0},
    )  # fmt: skip
    store.finish("tr-1", {"answer": "not found"})

    trace = rag.trace("tr-1", DANA)
    assert isinstance(trace, Trace) and isinstance(trace, dict)
    assert trace["question"] == f"why {SCRIPT}?" and [s["step"] for s in trace["steps"]] == [
        "retrieve",
        "grade",
        "rewrite",
    ]
    assert trace.step_timings() == [("retrieve", 12.5), ("grade", 1500.0), ("rewrite", 800.0)]
    html = trace._repr_html_()
    assert "<script>" not in html and ESCAPED in html
    assert "decision=fallback" in html and "attempt=1" in html and "node-a" in html and "0.0328" in html
    assert "qwen" in html and "300" in html
    assert "grade 1500 ms" in _pretty(trace)
    assert rag.trace("tr-1", Principal("eve", ["hr"])) is None


def _pretty(obj: object) -> str:
    from IPython.lib.pretty import pretty

    return pretty(obj)


def test_show_live_updates_one_display_with_steps_the_draft_then_the_checked_result(monkeypatch: Any) -> None:
    import IPython.display

    shown: list[str] = []

    class Handle:
        def update(self, obj: Any) -> None:
            shown.append(obj.data)

    monkeypatch.setattr(IPython.display, "display", lambda obj, display_id=False: Handle())
    result = _result(flagged=False)
    events = [StreamEvent("started", name="grade"), StreamEvent("step", name="grade", seconds=2.5),
              StreamEvent("started", name="generate"), StreamEvent("draft", text="Refunds take "),
              StreamEvent("draft", text=SCRIPT), StreamEvent("step", name="generate", seconds=4.0),
              StreamEvent("answer", text="Refunds take 14 days [S1]."), StreamEvent("result", data=result)]  # fmt: skip
    assert show_live(events) is result
    assert "running" in shown[0] and "2.5 s" in shown[1]
    assert "Draft, not yet checked" in shown[4] and ESCAPED in shown[4] and SCRIPT not in shown[4]
    assert "4.0 s" in shown[-1] and "Draft" not in shown[-1] and "t-123" in shown[-1]
