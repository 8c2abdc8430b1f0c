"""Run a retriever over a labelled set and report ranking quality and latency.

The harness knows nothing about how retrieval works: it takes a function from a
question to a ranked list of document ids, so the same code measures the real
permission-scoped retriever, a baseline, or a fake in a test.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from enterprise_rag.evaluation.dataset import EvalSet
from enterprise_rag.evaluation.metrics import (
    Gain,
    mrr,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    unique_in_order,
)
from enterprise_rag.extras import require
from enterprise_rag.principal import Principal

logger = logging.getLogger(__name__)

Retrieve = Callable[[str], Sequence[str]]
DEFAULT_KS: tuple[int, ...] = (1, 3, 5, 10, 100)
MRR_CUTOFF = 10
NDCG_HEADLINE = 10  # the cutoff BEIR reports


@dataclass(frozen=True)
class QueryResult:
    """One query's outcome: what came back (deduplicated, cut), its scores and timing."""

    query_id: str
    question: str
    retrieved: tuple[str, ...]
    metrics: dict[str, float]
    latency_ms: float
    num_relevant: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {**asdict(self), "retrieved": list(self.retrieved)}


@dataclass(frozen=True)
class EvalReport:
    """Mean metrics over the queries of one run, with per-query rows and latency."""

    name: str
    ks: tuple[int, ...]
    metrics: dict[str, float]
    per_query: tuple[QueryResult, ...]
    latency_p50_ms: float
    latency_p95_ms: float

    @property
    def num_queries(self) -> int:
        """How many queries the means are over."""
        return len(self.per_query)

    def recall_curve(self) -> list[tuple[int, float]]:
        """``(k, mean recall@k)`` for each k, ready to plot."""
        return [(k, self.metrics[f"recall@{k}"]) for k in self.ks]

    def to_table(self) -> list[dict[str, Any]]:
        """Rows ``{"metric", "value"}`` for display (``pandas.DataFrame(rows)`` or rich)."""
        rows: list[dict[str, Any]] = [{"metric": "queries", "value": self.num_queries}]
        rows += [{"metric": name, "value": value} for name, value in self.metrics.items()]
        rows.append({"metric": "latency_p50_ms", "value": self.latency_p50_ms})
        rows.append({"metric": "latency_p95_ms", "value": self.latency_p95_ms})
        return rows

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with the means, latency and every per-query row."""
        return {
            "name": self.name,
            "num_queries": self.num_queries,
            "ks": list(self.ks),
            "metrics": dict(self.metrics),
            "latency_ms": {"p50": self.latency_p50_ms, "p95": self.latency_p95_ms},
            "per_query": [row.to_dict() for row in self.per_query],
        }


def _check_ks(ks: Iterable[int]) -> tuple[int, ...]:
    cleaned = tuple(sorted(set(ks)))
    if not cleaned or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in cleaned):
        raise ValueError(f"ks must be positive integers, got {ks!r}")
    return cleaned


def _metric_names(ks: tuple[int, ...]) -> list[str]:
    ndcg_ks = sorted(set(ks) | {NDCG_HEADLINE})
    return (
        [f"recall@{k}" for k in ks]
        + [f"precision@{k}" for k in ks]
        + [f"ndcg@{k}" for k in ndcg_ks]
        + [f"mrr@{MRR_CUTOFF}"]
    )


def _score(ranked: Sequence[str], relevant: Mapping[str, int], ks: tuple[int, ...], gain: Gain) -> dict[str, float]:
    scores: dict[str, float] = {}
    for k in ks:
        scores[f"recall@{k}"] = recall_at_k(ranked, relevant, k)
        scores[f"precision@{k}"] = precision_at_k(ranked, relevant, k)
    for k in sorted(set(ks) | {NDCG_HEADLINE}):
        scores[f"ndcg@{k}"] = ndcg_at_k(ranked, relevant, k, gain=gain)
    scores[f"mrr@{MRR_CUTOFF}"] = mrr(ranked, relevant, k=MRR_CUTOFF)
    return scores


def _as_ids(result: object, qid: str) -> list[str]:
    """Refuse anything but a list of string ids: a type mix-up would silently score 0."""
    if isinstance(result, (str, bytes)) or not isinstance(result, Iterable):
        raise TypeError(f"retrieve() for query {qid!r} must return a sequence of doc ids, got {type(result).__name__}")
    ids = list(result)
    for item in ids:
        if not isinstance(item, str):
            raise TypeError(
                f"retrieve() for query {qid!r} returned a {type(item).__name__}; return document id strings "
                "matching the qrels (e.g. node.metadata['document_id'])"
            )
    return ids


def _run(
    evalset: EvalSet,
    retrieve_for: Callable[[str, str], object],
    ks: Iterable[int],
    name: str,
    gain: Gain,
    progress: Callable[[int, int], None] | None,
) -> EvalReport:
    cut = _check_ks(ks)
    if not len(evalset):
        raise ValueError(f"evaluation set {evalset.name or ''!r} has no judged queries")
    keep = max(max(cut), NDCG_HEADLINE)
    rows: list[QueryResult] = []
    total = len(evalset)
    for done, (qid, question) in enumerate(evalset.queries.items(), start=1):
        start = time.perf_counter()
        try:
            ranked = unique_in_order(_as_ids(retrieve_for(qid, question), qid))
        except Exception as exc:
            exc.add_note(f"while evaluating query {qid!r}: {question[:80]!r}")
            raise
        latency_ms = (time.perf_counter() - start) * 1000.0
        relevant = evalset.qrels[qid]
        rows.append(
            QueryResult(
                query_id=qid,
                question=question,
                retrieved=tuple(ranked[:keep]),
                metrics=_score(ranked, relevant, cut, gain),
                latency_ms=latency_ms,
                num_relevant=sum(1 for g in relevant.values() if g > 0),
            )
        )
        if progress is not None:
            progress(done, total)
    if not any(row.metrics[f"recall@{cut[-1]}"] > 0 for row in rows):
        logger.warning(
            "%s: no retrieved id matched any judged document in %d queries; check that retrieve() returns "
            "the same ids as the qrels (document_id vs source path)",
            name or "evaluation",
            len(rows),
        )
    names = _metric_names(cut)
    means = {m: float(np.mean([row.metrics[m] for row in rows])) for m in names}
    latencies = np.array([row.latency_ms for row in rows])
    return EvalReport(
        name=name,
        ks=cut,
        metrics=means,
        per_query=tuple(rows),
        latency_p50_ms=float(np.percentile(latencies, 50)),
        latency_p95_ms=float(np.percentile(latencies, 95)),
    )


def evaluate(
    retrieve: Retrieve,
    evalset: EvalSet,
    ks: Iterable[int] = DEFAULT_KS,
    *,
    name: str = "",
    ndcg_gain: Gain = "linear",
    progress: Callable[[int, int], None] | None = None,
) -> EvalReport:
    """Ask every question of ``evalset`` through ``retrieve`` and score the rankings.

    ``retrieve`` maps a question to document ids, best first; repeats are dropped
    (first occurrence kept) before scoring. Reports mean recall@k and precision@k
    for each k, ndcg@10 and ndcg@k, mrr@10, and p50/p95 latency of the calls.
    ``progress(done, total)`` is called after each query (for a progress bar).

    >>> evalset = EvalSet(queries={"q1": "refund window?"}, qrels={"q1": {"refunds.md": 1}})
    >>> evaluate(lambda question: ["faq.md", "refunds.md"], evalset, ks=(1, 2)).metrics["recall@2"]
    1.0
    """
    return _run(evalset, lambda _qid, question: retrieve(question), ks, name or evalset.name, ndcg_gain, progress)


def evaluate_scopes(
    make_retrieve: Callable[[Principal], Retrieve],
    evalset: EvalSet,
    principals: Mapping[str, Principal],
    ks: Iterable[int] = DEFAULT_KS,
    *,
    ndcg_gain: Gain = "linear",
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, EvalReport]:
    """The same set asked as different principals, one report per name.

    The qrels are not scoped, so a principal who may not read a relevant document
    loses recall on it: the gap between reports is what the permissions hide.

    >>> def make(user):                                   # principal -> (question -> document ids)
    ...     retriever = rag.as_retriever(user, top_k=10)
    ...     return lambda q: [n.node.metadata["source"] for n in retriever.retrieve(q)]
    >>> reports = evaluate_scopes(make, evalset, {"hr": Principal("hana", ["hr"]),
    ...                                           "staff": Principal("sam", ["all-staff"])})  # doctest: +SKIP
    >>> compare_table(reports)                                                          # doctest: +SKIP
    """
    return {
        label: evaluate(make_retrieve(principal), evalset, ks, name=label, ndcg_gain=ndcg_gain, progress=progress)
        for label, principal in principals.items()
    }


def evaluate_as_users(
    make_retrieve: Callable[[Principal], Retrieve],
    evalset: EvalSet,
    ks: Iterable[int] = DEFAULT_KS,
    *,
    default: Principal | None = None,
    name: str = "",
    ndcg_gain: Gain = "linear",
    progress: Callable[[int, int], None] | None = None,
) -> EvalReport:
    """Ask each question as the user the labelled set names for it (``evalset.users``).

    Questions without a user are asked as ``default``; with no default they are an error,
    because retrieval never runs without a principal.

    >>> evalset = load_labelled_yaml("questions.yaml")                  # doctest: +SKIP
    >>> report = evaluate_as_users(make, evalset, default=Principal("sam", ["all-staff"]))  # doctest: +SKIP
    >>> report.metrics["ndcg@10"], report.latency_p95_ms                # doctest: +SKIP
    """
    missing = [qid for qid in evalset.queries if qid not in evalset.users]
    if missing and default is None:
        raise ValueError(f"{len(missing)} questions name no user (e.g. {missing[0]!r}); pass default=Principal(...)")
    retrievers: dict[Principal, Retrieve] = {}

    def retrieve_for(qid: str, question: str) -> Sequence[str]:
        principal = evalset.users.get(qid, default)
        if principal is None:  # unreachable: checked above; kept so it can never run unscoped
            raise ValueError(f"question {qid!r} names no user")
        if principal not in retrievers:
            retrievers[principal] = make_retrieve(principal)
        return retrievers[principal](question)

    return _run(evalset, retrieve_for, ks, name or evalset.name, ndcg_gain, progress)


def compare_table(reports: Mapping[str, EvalReport]) -> list[dict[str, Any]]:
    """Side-by-side rows ``{"metric", <report name>: value, ...}`` for several reports.

    >>> import pandas as pd; pd.DataFrame(compare_table({"dense": dense, "hybrid": hybrid}))  # doctest: +SKIP
    """
    tables = {label: {row["metric"]: row["value"] for row in rep.to_table()} for label, rep in reports.items()}
    metrics = list(dict.fromkeys(m for table in tables.values() for m in table))
    return [{"metric": m, **{label: table.get(m) for label, table in tables.items()}} for m in metrics]


def plot_recall_curve(reports: Mapping[str, EvalReport], path: str | Path, *, title: str = "Recall@k") -> Path:
    """Plot mean recall@k against k for each named report and save it as a PNG.

    Uses matplotlib's object API (no pyplot), so it changes no global backend or
    state in a notebook. Needs the ``notebooks`` extra.

    >>> plot_recall_curve({"dense": dense, "hybrid": hybrid}, "recall.png")   # doctest: +SKIP
    PosixPath('recall.png')
    """
    require("matplotlib", "notebooks")
    from matplotlib.figure import Figure

    if not reports:
        raise ValueError("plot_recall_curve needs at least one report")
    fig = Figure(figsize=(6, 4), dpi=100)
    ax = fig.add_subplot()
    all_ks: set[int] = set()
    for label, report in reports.items():
        curve = report.recall_curve()
        all_ks.update(k for k, _ in curve)
        ax.plot([k for k, _ in curve], [r for _, r in curve], marker="o", label=label or report.name)
    if max(all_ks) / min(all_ks) >= 20:
        ax.set_xscale("log")
        ax.minorticks_off()
    ax.set_xticks(sorted(all_ks), labels=[str(k) for k in sorted(all_ks)])
    ax.set_xlabel("k")
    ax.set_ylabel("mean recall@k")
    ax.set_ylim(0.0, 1.02)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", bbox_inches="tight")
    logger.info("recall curve for %d reports written to %s", len(reports), out)
    return out
