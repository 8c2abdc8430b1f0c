"""Rich notebook display: HTML tables for query results, retrieved passages, ingest reports and traces.

Jupyter calls ``_repr_html_`` on a cell's value; the result classes delegate
here so every rendering lives in one place. Everything shown comes from
documents, users or the model, so every value is HTML-escaped: a passage that
contains ``<script>`` shows as text and never runs in the notebook.

>>> "no passages" in retrieval_html([])
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from llama_index.core.schema import NodeWithScore

from enterprise_rag.schema.documents import shown_source

EXCERPT_CHARS = 300
SUMMARY_CHARS = 160
LISTED_DOCUMENTS = 30  # per outcome in an ingest report; failures are always all listed
_TABLE = '<table border="1" class="dataframe" style="border-collapse:collapse">'
_CELL = 'style="text-align:left;vertical-align:top"'
_WARNING = '<p style="color:#b00020;font-weight:bold">{}</p>'


def cut(value: Any, limit: int) -> str:
    """``value`` as text of at most ``limit`` characters (with an ellipsis); not yet escaped."""
    raw = "" if value is None else str(value)
    return raw if len(raw) <= limit else raw[: limit - 1].rstrip() + "…"


def text(value: Any) -> str:
    """``value`` as escaped HTML text."""
    return escape("" if value is None else str(value))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """An HTML table; every header and cell is escaped."""
    head = "".join(f"<th {_CELL}>{text(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td {_CELL}>{text(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"{_TABLE}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _heading(title: str) -> str:
    return f"<h4>{text(title)}</h4>"


def _score(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else "" if value is None else str(value)


def _flatten(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dicts as dotted ``(key, value)`` rows: ``support.label``, ``sources.web``."""
    rows: list[tuple[str, Any]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            rows += _flatten(value, f"{name}.")
        elif isinstance(value, list):
            rows.append((name, "; ".join(str(v) for v in value) if value else "none"))
        else:
            rows.append((name, _score(value)))
    return rows


# ---- query results -------------------------------------------------------------------------------------
def query_result_html(result: Any) -> str:
    """Answer, citations (label, kind, source, page, section, quote), evaluation and pipeline tables."""
    parts = []
    if result.pipeline.get("flagged_for_review"):
        parts.append(_WARNING.format("⚠ Flagged for review: the answer did not pass the support check."))
    parts.append(_heading("Answer"))
    parts.append(f'<div style="white-space:pre-wrap">{text(result.answer)}</div>')
    parts.append(_heading(f"Citations ({len(result.citations)})"))
    if result.citations:
        rows = [(c.label, c.kind, c.shown_source, c.page, c.section, c.quote) for c in result.citations]
        parts.append(table(["label", "kind", "source", "page", "section", "quote"], rows))
    else:
        parts.append("<p>no citations</p>")
    parts.append(_heading("Evaluation"))
    parts.append(table(["signal", "value"], _flatten(result.evaluation)))
    parts.append(_heading("Pipeline"))
    parts.append(table(["step", "value"], _flatten(result.pipeline)))
    parts.append(f"<p><small>trace id: <code>{text(result.trace_id)}</code></small></p>")
    return "".join(parts)


def query_result_text(result: Any) -> str:
    """A short plain-text view: answer, citations, confidence."""
    lines = [result.answer, ""]
    lines += [
        f"[{c.label}] {c.shown_source}" + (f" p.{c.page}" if c.page else "") + (f", {c.section}" if c.section else "")
        for c in result.citations
    ]
    flagged = " FLAGGED FOR REVIEW" if result.pipeline.get("flagged_for_review") else ""
    lines.append(f"confidence {result.evaluation.get('confidence')}{flagged}; trace {result.trace_id}")
    return "\n".join(lines)


def progress_html(steps: Sequence[tuple[str, float | None]], draft: str) -> str:
    """A query in progress: each step (seconds once finished, else running) and the unchecked draft."""
    rows = [(name, "running" if seconds is None else f"{seconds:.1f} s") for name, seconds in steps]
    parts = [_heading("Steps"), table(["step", "time"], rows)]
    if draft:
        parts.append(_heading("Draft, not yet checked"))
        parts.append(f'<div style="white-space:pre-wrap;color:#666">{text(draft)}</div>')
    return "".join(parts)


def show_live(events: Iterable[Any]) -> Any:
    """Show a streamed query (``rag.stream_query(...)``) in a notebook as it runs, one display updated in
    place: the steps as they begin and finish, the draft as it is written, then the checked result.
    Returns the :class:`~enterprise_rag.schema.result.QueryResult`."""
    from IPython.display import HTML, display

    handle = display(HTML(""), display_id=True)
    steps: list[tuple[str, float | None]] = []
    draft, result = "", None
    for event in events:
        if event.kind == "started":
            steps.append((event.name, None))
        elif event.kind == "step":
            running = [i for i, step in enumerate(steps) if step == (event.name, None)]
            if running:
                steps[running[-1]] = (event.name, event.seconds)
            else:
                steps.append((event.name, event.seconds))
        elif event.kind == "draft":
            draft += event.text
        elif event.kind == "result":
            result = event.data
        if event.kind in ("started", "step", "draft") and handle is not None:
            handle.update(HTML(progress_html(steps, draft)))
    if handle is not None and result is not None:
        handle.update(HTML(progress_html(steps, "") + query_result_html(result)))
    return result


# ---- retrieval -----------------------------------------------------------------------------------------
def retrieval_html(nodes: Sequence[NodeWithScore]) -> str:
    """One row per passage: rank, score, source, page, title, status and a text excerpt."""
    if not nodes:
        return "<p>no passages (nothing this user may read matched)</p>"
    rows = []
    for rank, hit in enumerate(nodes, start=1):
        meta = hit.node.metadata
        excerpt = " ".join(hit.node.get_content().split())
        rows.append(
            (
                rank,
                _score(hit.score),
                shown_source(meta),
                meta.get("page"),
                meta.get("title"),
                meta.get("status"),
                cut(excerpt, EXCERPT_CHARS),
            )
        )
    return table(["rank", "score", "source", "page", "title", "status", "text"], rows)


def retrieval_text(nodes: Sequence[NodeWithScore]) -> str:
    """A short plain-text view: one line per passage with its score, source and page."""
    lines = [f"{len(nodes)} passages"]
    for rank, hit in enumerate(nodes, start=1):
        meta = hit.node.metadata
        page = f" p.{meta['page']}" if meta.get("page") else ""
        lines.append(f"{rank:>2}. {_score(hit.score)}  {shown_source(meta)}{page}")
    return "\n".join(lines)


# ---- ingest reports ------------------------------------------------------------------------------------
def ingest_report_html(report: Any) -> str:
    """Counts and timings, then every document by outcome; failures with their reason."""
    parts = [f"<p>{text(report.summary())}</p>"]
    timings = [("parse", report.seconds_parse), ("embed", report.seconds_embed), ("write", report.seconds_write)]
    parts.append(
        table(
            ["added", "updated", "unchanged", "failed", "nodes written", "leaves embedded", "embeddings reused"],
            [
                (
                    len(report.added),
                    len(report.updated),
                    len(report.unchanged),
                    len(report.failed),
                    report.nodes_written,
                    report.leaves_embedded,
                    report.embeddings_reused,
                )
            ],
        )
    )
    parts.append(table(["stage", "seconds"], [(name, f"{s:.2f}") for name, s in timings]))
    if report.failed:
        parts.append(_WARNING.format(f"{len(report.failed)} document(s) failed"))
    rows: list[tuple[str, str, str]] = []
    for outcome, paths in (("added", report.added), ("updated", report.updated), ("unchanged", report.unchanged)):
        rows += [(outcome, p, "") for p in paths[:LISTED_DOCUMENTS]]
        if len(paths) > LISTED_DOCUMENTS:
            rows.append((outcome, f"… and {len(paths) - LISTED_DOCUMENTS} more", ""))
    rows += [("failed", f.path, f.reason) for f in report.failed]
    rows += [("warning", w.path, w.message) for w in report.warnings]
    if rows:
        parts.append(table(["outcome", "path", "reason"], rows))
    return "".join(parts)


# ---- traces --------------------------------------------------------------------------------------------
def _summary(data: Mapping[str, Any]) -> str:
    """One line per step: scalars as ``key=value``, lists by their length."""
    items = []
    for key, value in data.items():
        if isinstance(value, list):
            items.append(f"{key}: {len(value)}")
        elif isinstance(value, Mapping):
            items.append(
                f"{key}: " + ", ".join(f"{k}={_score(v)}" for k, v in value.items() if not isinstance(v, list))
            )
        elif value not in (None, ""):
            items.append(f"{key}={cut(_score(value), SUMMARY_CHARS)}")
    return "; ".join(items)


def trace_html(trace: Mapping[str, Any]) -> str:
    """Header, steps with timings and decisions, retrieved chunks, grades and LLM calls."""
    steps = trace.get("steps") or []
    calls = trace.get("llm_calls") or []
    total_ms = sum(float(s.get("ms") or 0) for s in steps)
    parts = [
        _heading(f"Trace {trace.get('trace_id', '')}"),
        table(
            ["question", "user", "groups", "status", "steps", "LLM calls", "step time (ms)"],
            [
                (
                    trace.get("question"),
                    trace.get("user_id"),
                    ", ".join(trace.get("groups") or []),
                    trace.get("status"),
                    len(steps),
                    len(calls),
                    f"{total_ms:.0f}",
                )
            ],
        ),
    ]
    if trace.get("error"):
        parts.append(_WARNING.format(text(f"error: {trace['error']}")))
    parts.append(_heading("Steps"))
    parts.append(
        table(
            ["#", "step", "ms", "what happened"],
            [
                (s.get("seq"), s.get("step"), f"{float(s.get('ms') or 0):.0f}", _summary(s.get("data") or {}))
                for s in steps
            ],
        )
    )
    retrievals = [s["data"] for s in steps if s.get("step") == "retrieve" and s.get("data")]
    for n, data in enumerate(retrievals, start=1):
        results = data.get("results") or []
        parts.append(_heading(f"Retrieved chunks, round {n}: {data.get('query', '')}"))
        parts.append(table(["rank", "node id", "score"], [(i, r[0], _score(r[1])) for i, r in enumerate(results, 1)]))
    grades = [g for s in steps if s.get("step") == "grade" for g in (s.get("data") or {}).get("grades") or []]
    if grades:
        parts.append(_heading("Grades"))
        parts.append(
            table(
                ["node id", "grade", "confidence", "method", "reason"],
                [
                    (
                        g.get("node_id"),
                        g.get("grade"),
                        _score(g.get("confidence")),
                        g.get("method"),
                        cut(g.get("reason"), SUMMARY_CHARS),
                    )
                    for g in grades
                ],
            )
        )
    if calls:
        parts.append(_heading("LLM calls"))
        parts.append(
            table(
                ["#", "name", "role", "model", "prompt tokens", "of them cached", "completion tokens", "ms"],
                [
                    (
                        c.get("seq"),
                        c.get("name"),
                        c.get("role"),
                        c.get("model"),
                        c.get("prompt_tokens"),
                        c.get("cached_tokens"),
                        c.get("completion_tokens"),
                        f"{float(c.get('ms') or 0):.0f}",
                    )
                    for c in calls
                ],
            )
        )
    return "".join(parts)


def trace_text(trace: Mapping[str, Any], timings: Sequence[tuple[str, float]]) -> str:
    """A short plain-text view: id, status, question and the steps with their milliseconds."""
    steps = " → ".join(f"{name} {ms:.0f} ms" for name, ms in timings)
    return f"Trace {trace.get('trace_id')} ({trace.get('status')}): {trace.get('question')!r}\n{steps}"
