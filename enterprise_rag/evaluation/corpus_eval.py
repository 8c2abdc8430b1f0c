"""Evaluate an already-ingested store: the glue between the harness and :class:`EnterpriseRAG`.

The harness (:mod:`.runner`) scores lists of ids; this module turns the live,
permission-scoped retriever into such lists. A labelled set may name relevant
documents by ``document_id`` or by source path (relative to wherever they were
ingested from), so each retrieved node is labelled with its ``document_id`` when
that is what the qrels use, else with the judged path its source ends with.
It also ingests a BEIR corpus and runs one set over several retrieval modes and
principals, one :class:`~.runner.EvalReport` per column of a comparison table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from enterprise_rag.evaluation.dataset import EvalDataError, EvalSet, iter_beir_corpus
from enterprise_rag.evaluation.runner import EvalReport, Retrieve, evaluate_as_users, evaluate_scopes
from enterprise_rag.ingest.pipeline import Ingestor
from enterprise_rag.principal import Principal
from enterprise_rag.retrieval.retriever import RetrievalOptions
from enterprise_rag.schema.documents import text_document
from enterprise_rag.store.documents import unmatched_labels

if TYPE_CHECKING:
    from enterprise_rag.rag import EnterpriseRAG
    from enterprise_rag.schema.ingest import IngestReport, Progress

__all__ = [
    "MODES",
    "EvalRun",
    "LabelMatcher",
    "ingest_beir_corpus",
    "missing_labels",
    "parse_principal",
    "parse_scopes",
    "run_modes",
]

MODES: tuple[str, ...] = ("dense", "text", "hybrid")


def parse_principal(spec: str) -> Principal:
    """``"dana:hr,all-staff"`` -> ``Principal("dana", ["hr", "all-staff"])``; ``"dana"`` has no groups."""
    user, _, groups = spec.partition(":")
    if not user.strip():
        raise EvalDataError(f"principal {spec!r} must look like USER:GROUP1,GROUP2")
    return Principal(user.strip(), [g.strip() for g in groups.split(",") if g.strip()])


def parse_scopes(specs: Sequence[str]) -> dict[str, Principal]:
    """``--as`` values by label: the user id, or ``user:groups`` when one user appears twice."""
    principals = [parse_principal(spec) for spec in specs]
    users = [p.user_id for p in principals]
    return {(p.user_id if users.count(p.user_id) == 1 else f"{p.user_id}:{','.join(p.groups)}"): p for p in principals}


def _normalise(label: str) -> str:
    path = label.strip().replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path.rstrip("/")


class LabelMatcher:
    """Labels a retrieved node with the id the qrels use for its document.

    Its ``document_id`` when that is judged; else the judged path its ``source``
    ends with (whole path components, longest match first), so
    ``handbook/guide.md`` matches ``/srv/docs/handbook/guide.md`` but not
    ``/srv/docs/old-handbook/guide.md``; else its ``document_id`` (unjudged).
    """

    def __init__(self, labels: Iterable[str]) -> None:
        self._ids = set(labels)
        self._paths = {_normalise(label): label for label in self._ids if _normalise(label)}

    def __call__(self, metadata: Mapping[str, Any]) -> str:
        doc_id = str(metadata.get("document_id") or "")
        if doc_id in self._ids:
            return doc_id
        source = str(metadata.get("source") or "").replace("\\", "/")
        parts = source.split("/")
        for start in range(len(parts)):
            label = self._paths.get("/".join(parts[start:]))
            if label is not None:
                return label
        return doc_id or source


def judged_labels(evalset: EvalSet) -> list[str]:
    """Every document id or path the set judges relevant (grade > 0), in first-seen order."""
    return list(dict.fromkeys(doc for docs in evalset.qrels.values() for doc, grade in docs.items() if grade > 0))


def missing_labels(rag: EnterpriseRAG, labels: Sequence[str], *, by_path: bool = True) -> list[str]:
    """Judged labels that match no ingested document (by id, or by id or source-path suffix).

    Such a label can never be retrieved, so its questions lose recall whatever the
    retriever does: usually a wrong path or a document that was never ingested.
    """
    if not labels:
        return []
    normalised = {_normalise(label) or label: label for label in labels}
    with rag.db.connection() as conn:
        missing = unmatched_labels(conn, list(normalised), by_path=by_path)
    return [label for key, label in normalised.items() if key in missing]


def make_retrieve_factory(
    rag: EnterpriseRAG, mode: str, top_k: int, matcher: LabelMatcher
) -> Callable[[Principal], Retrieve]:
    """``principal -> (question -> labelled ids)`` over ``rag``'s permission-scoped retriever in ``mode``."""
    options = RetrievalOptions(mode=mode)  # type: ignore[arg-type]

    def make(principal: Principal) -> Retrieve:
        retriever = rag.as_retriever(principal, top_k=top_k, options=options)
        return lambda question: [matcher(n.node.metadata) for n in retriever.retrieve(question)]

    return make


@dataclass(frozen=True)
class EvalRun:
    """One column of the comparison: a retrieval mode asked as one principal (or per-question users)."""

    column: str
    mode: str
    principal: str
    report: EvalReport

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON dict with the mode and principal it was run with."""
        return {"mode": self.mode, "principal": self.principal, **self.report.to_dict()}


def run_modes(
    rag: EnterpriseRAG,
    evalset: EvalSet,
    modes: Sequence[str],
    ks: Sequence[int],
    *,
    default: Principal | None = None,
    scopes: Mapping[str, Principal] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[EvalRun]:
    """Evaluate ``evalset`` in each retrieval mode, as each of ``scopes`` or else per-question users.

    Without ``scopes`` each question is asked as the user it names, falling back to
    ``default``. Columns are named by mode, by scope, or ``scope/mode`` when both vary.
    ``progress(column)`` is called after each question.
    """
    matcher = LabelMatcher(judged_labels(evalset))
    top_k = max(*ks, 10)  # ndcg@10 is always reported
    runs: list[EvalRun] = []
    for mode in modes:
        make = make_retrieve_factory(rag, mode, top_k, matcher)
        if scopes:
            for label, principal in scopes.items():
                column = label if len(modes) == 1 else f"{label}/{mode}" if len(scopes) > 1 else mode
                tick = (lambda _d, _t, c=column: progress(c)) if progress else None
                report = evaluate_scopes(make, evalset, {column: principal}, ks, progress=tick)[column]
                runs.append(EvalRun(column, mode, principal.user_id, report))
        else:
            tick = (lambda _d, _t, c=mode: progress(c)) if progress else None
            report = evaluate_as_users(make, evalset, ks, default=default, name=mode, progress=tick)
            who = "per-question" if evalset.users else (default.user_id if default else "")
            runs.append(EvalRun(mode, mode, who, report))
    return runs


def _beir_documents(folder: Path) -> Iterator[Any]:
    for record in iter_beir_corpus(folder):
        yield text_document(
            f"beir/{record.doc_id}", record.title or record.doc_id, record.text, {"document_id": record.doc_id}
        )


def count_beir_corpus(folder: str | Path) -> int:
    """Records in a BEIR folder's ``corpus.jsonl`` (non-blank lines), for a progress bar total."""
    with (Path(folder) / "corpus.jsonl").open(encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


def ingest_beir_corpus(
    rag: EnterpriseRAG, folder: str | Path, allowed_groups: Sequence[str], progress: Progress | None = None
) -> IngestReport:
    """Ingest a BEIR corpus, one document per record (source ``beir/<_id>``, ``document_id`` = ``_id``)."""
    root = Path(folder)
    if not (root / "corpus.jsonl").is_file():
        raise EvalDataError(f"no BEIR corpus at {root / 'corpus.jsonl'}")
    ingestor = Ingestor(rag.db, rag.providers.embed_model, rag.settings.ingest)
    return ingestor.ingest_documents(_beir_documents(root), allowed_groups=list(allowed_groups), progress=progress)
