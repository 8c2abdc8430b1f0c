"""The result of one query and its JSON payload: answer, citations, evaluation, pipeline, trace id."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from llama_index.core.schema import NodeWithScore

from enterprise_rag.schema import display


@dataclass(frozen=True)
class Citation:
    """One cited source; readable as ``c.source`` and ``c["source"]``.

    ``kind`` is ``corpus`` or ``web``; ``quote`` is the sentence of the source the citation points at.
    ``page`` is the PDF page or the slide number; ``section`` the headings above the passage below the
    document title (for a spreadsheet: sheet name and rows, "Prices > rows 22-41"). ``source`` is the
    full path (or URL) the document is stored under, the key delete and sync work by;
    ``relative_source`` is the same path relative to the folder it was ingested from, for people.

    >>> Citation("S1", "policies/refunds.md", 2, "doc-1", "Refunds within 30 days.")["page"]
    2
    """

    label: str
    source: str
    page: int | None
    document_id: str
    quote: str
    kind: str = "corpus"
    section: str = ""
    relative_source: str = ""

    @property
    def shown_source(self) -> str:
        """The source as a person reads it: relative to its ingest folder where it has one."""
        return self.relative_source or self.source

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class QueryResult:
    """The outcome of :meth:`EnterpriseRAG.query`: the answer, its citations, checks and trace id.

    ``evaluation`` holds confidence, retrieval relevance, support and usefulness
    labels and the corpus / web source counts; ``pipeline`` what the workflow did
    (decision, rewrites, retries, LLM calls, tokens, latency); ``sources`` the
    numbered passages the generator saw (text included). ``to_dict()`` is the
    JSON payload callers receive (``enterprise-rag ask --json`` prints it).

    >>> res = rag.query("How long is the refund window?", user=dana)    # doctest: +SKIP
    >>> res.answer                                                      # doctest: +SKIP
    'Customers can ask for a refund within 30 days [S1].'
    >>> [(c.label, c.source, c.page) for c in res.citations]            # doctest: +SKIP
    [('S1', '/srv/docs/policies/refunds.md', None)]
    >>> res.evaluation["support"]["label"], res.pipeline["decision"]    # doctest: +SKIP
    ('fully_supported', 'proceed')
    >>> json.dumps(res.to_dict())                                       # doctest: +SKIP
    """

    answer: str
    citations: list[Citation]
    evaluation: dict[str, Any]
    pipeline: dict[str, Any]
    trace_id: str
    sources: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON payload: answer, citations, evaluation, pipeline, trace_id."""
        return {
            "answer": self.answer,
            "citations": [
                {k: v for k, v in c.to_dict().items() if k in ("label", "source", "page", "document_id", "quote")}
                for c in self.citations
            ],
            "evaluation": self.evaluation,
            "pipeline": self.pipeline,
            "trace_id": self.trace_id,
        }

    def _repr_html_(self) -> str:
        return display.query_result_html(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(display.query_result_text(self))


class RetrievedNodes(list[NodeWithScore]):
    """The passages :meth:`EnterpriseRAG.retrieve` returns: a plain ``list[NodeWithScore]`` that shows as a table.

    >>> "no passages" in RetrievedNodes([])._repr_html_()
    True
    """

    def _repr_html_(self) -> str:
        return display.retrieval_html(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(display.retrieval_text(self))


class Trace(dict[str, Any]):
    """A stored trace (:meth:`EnterpriseRAG.trace`): a plain dict that shows as tables in a notebook."""

    def step_timings(self) -> list[tuple[str, float]]:
        """``(step name, milliseconds)`` in the order the steps ran, for a latency chart."""
        return [(str(s["step"]), float(s["ms"] or 0.0)) for s in self.get("steps") or []]

    def _repr_html_(self) -> str:
        return display.trace_html(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(display.trace_text(self, self.step_timings()))
