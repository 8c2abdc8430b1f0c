"""Labelled question sets for retrieval evaluation, and their loaders.

Two formats: the BEIR layout (public benchmarks such as SciFact) and a small YAML
format of our own for questions about an organisation's documents, where each
question may also say which user asks it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from enterprise_rag.errors import RagError
from enterprise_rag.principal import Principal

logger = logging.getLogger(__name__)

__all__ = [
    "CorpusRecord",
    "EvalDataError",
    "EvalSet",
    "iter_beir_corpus",
    "load_beir",
    "load_labelled_yaml",
]


class EvalDataError(RagError, ValueError):
    """An evaluation file is malformed; the message names the file and line or entry."""


@dataclass
class EvalSet:
    """Questions with their relevance judgments, ready for :func:`~.runner.evaluate`.

    ``qrels[qid]`` maps document id to grade (``<= 0`` = judged non-relevant).
    Queries without any relevant judgment are dropped on construction (their
    metrics would be 0 whatever the retriever does), as are judgments for unknown
    queries; both counts are logged. ``users`` optionally names who asks each
    question (from the YAML format).
    """

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    corpus_path: Path | None = None
    users: dict[str, Principal] = field(default_factory=dict)
    name: str = ""
    dropped_queries: tuple[str, ...] = field(default=(), init=False, repr=False)

    def __post_init__(self) -> None:
        queries = {str(qid): text for qid, text in self.queries.items()}
        qrels = {str(qid): {str(d): int(g) for d, g in docs.items()} for qid, docs in self.qrels.items()}
        unjudged = [qid for qid in queries if not any(g > 0 for g in qrels.get(qid, {}).values())]
        orphans = [qid for qid in qrels if qid not in queries]
        if unjudged:
            logger.info("%s: dropped %d queries without relevant judgments", self.name or "evalset", len(unjudged))
        if orphans:
            logger.info("%s: dropped judgments for %d unknown queries", self.name or "evalset", len(orphans))
        dropped = set(unjudged)
        self.queries = {qid: text for qid, text in queries.items() if qid not in dropped}
        self.qrels = {qid: qrels[qid] for qid in self.queries}
        self.users = {str(qid): p for qid, p in self.users.items() if str(qid) in self.queries}
        self.dropped_queries = tuple(unjudged)
        if not self.queries:
            logger.warning("%s: no query has a relevant judgment; nothing to evaluate", self.name or "evalset")

    def __len__(self) -> int:
        return len(self.queries)

    @property
    def judgments(self) -> int:
        """Number of (query, document) judgments kept, non-relevant ones included."""
        return sum(len(docs) for docs in self.qrels.values())

    def subset(self, query_ids: Iterable[str]) -> EvalSet:
        """The same set restricted to ``query_ids`` (for a quick run on a few queries)."""
        keep = [str(q) for q in query_ids]
        missing = [q for q in keep if q not in self.queries]
        if missing:
            raise KeyError(f"unknown query ids: {missing[:5]}")
        return EvalSet(
            queries={q: self.queries[q] for q in keep},
            qrels={q: self.qrels[q] for q in keep},
            corpus_path=self.corpus_path,
            users={q: self.users[q] for q in keep if q in self.users},
            name=self.name,
        )


@dataclass(frozen=True)
class CorpusRecord:
    """One document of a BEIR corpus; ``doc_id`` is what the qrels refer to."""

    doc_id: str
    title: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


def _iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise EvalDataError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
            if not isinstance(record, dict) or "_id" not in record:
                raise EvalDataError(f"{path}:{lineno}: expected an object with an '_id' field")
            yield lineno, record


def _corpus_file(folder: str | Path) -> Path:
    path = Path(folder)
    corpus = path if path.is_file() else path / "corpus.jsonl"
    if not corpus.is_file():
        raise FileNotFoundError(f"no BEIR corpus at {corpus}")
    return corpus


def iter_beir_corpus(folder: str | Path) -> Iterator[CorpusRecord]:
    """Stream the corpus of a BEIR folder (or a ``corpus.jsonl`` path) one record at a time.

    Streaming, because BEIR corpora run to millions of documents.
    """
    for _, record in _iter_jsonl(_corpus_file(folder)):
        extra = {k: v for k, v in record.items() if k not in ("_id", "title", "text")}
        meta = extra.pop("metadata", {}) if isinstance(extra.get("metadata"), dict) else {}
        yield CorpusRecord(
            doc_id=str(record["_id"]),
            title=str(record.get("title") or ""),
            text=str(record.get("text") or ""),
            metadata={**meta, **extra},
        )


def _queries_file(folder: Path, split: str) -> Path:
    candidates = [folder / f"queries.{split}.jsonl", folder / "queries.jsonl"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no BEIR queries in {folder}: looked for {', '.join(c.name for c in candidates)}")


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Read a BEIR qrels TSV (header optional); 4-column TREC lines are accepted too."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) == 1:
                fields = line.split()
            if not fields or fields == [""]:
                continue
            if lineno == 1 and fields[0].strip().lower() in ("query-id", "query_id", "qid"):
                continue
            if len(fields) == 4:
                fields = [fields[0], fields[2], fields[3]]
            if len(fields) != 3:
                raise EvalDataError(f"{path}:{lineno}: expected 'query-id<TAB>corpus-id<TAB>score'")
            qid, doc_id, score = (f.strip() for f in fields)
            try:
                grade = int(float(score))
            except ValueError as exc:
                raise EvalDataError(f"{path}:{lineno}: score {score!r} is not a number") from exc
            qrels.setdefault(qid, {})[doc_id] = grade
    return qrels


def load_beir(folder: str | Path, split: str = "test") -> EvalSet:
    """Load the queries and qrels of one split of a BEIR dataset folder.

    Reads ``queries.<split>.jsonl`` (else ``queries.jsonl``) and
    ``qrels/<split>.tsv``; the corpus is left on disk (see :func:`iter_beir_corpus`)
    and only its path is recorded.

    >>> evalset = load_beir("../shared/data/scifact")        # doctest: +SKIP
    >>> len(evalset), evalset.name                          # doctest: +SKIP
    (300, 'scifact/test')
    """
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"BEIR folder not found: {root}")
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        available = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
        raise FileNotFoundError(f"no qrels for split {split!r} at {qrels_path}; available: {available}")
    queries = {str(rec["_id"]): str(rec.get("text") or "") for _, rec in _iter_jsonl(_queries_file(root, split))}
    corpus = root / "corpus.jsonl"
    return EvalSet(
        queries=queries,
        qrels=_read_qrels(qrels_path),
        corpus_path=corpus if corpus.is_file() else None,
        name=f"{root.name}/{split}",
    )


def _parse_relevant(value: object, where: str) -> dict[str, int]:
    if value is None:
        return {}
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return {str(value): 1}
    if isinstance(value, list):
        return {str(doc): 1 for doc in value}
    if isinstance(value, Mapping):
        grades: dict[str, int] = {}
        for doc, grade in value.items():
            if isinstance(grade, bool) or not isinstance(grade, int):
                raise EvalDataError(f"{where}: grade of {doc!r} must be an integer, got {grade!r}")
            grades[str(doc)] = grade
        return grades
    raise EvalDataError(f"{where}: 'relevant' must be a list of ids or a mapping id -> grade")


def _parse_user(value: object, where: str) -> Principal | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or "user_id" not in value:
        raise EvalDataError(f"{where}: 'user' must be a mapping with 'user_id' (and optional 'groups')")
    groups = value.get("groups") or []
    if isinstance(groups, str):
        groups = [groups]
    if not isinstance(groups, list):
        raise EvalDataError(f"{where}: user 'groups' must be a list")
    return Principal(user_id=str(value["user_id"]), groups=[str(g) for g in groups])


def load_labelled_yaml(path: str | Path) -> EvalSet:
    """Load our own labelled questions file.

    Format::

        questions:
          - id: refund-window
            question: How long do customers have to ask for a refund?
            relevant: [policies/refunds.md]          # grade 1 each, or {doc: grade}
            user: {user_id: dana, groups: [support]}  # optional: who asks
    """
    source = Path(path)
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise EvalDataError(f"{source}: not valid YAML ({exc})") from exc
    if not isinstance(data, Mapping) or not isinstance(data.get("questions"), list):
        raise EvalDataError(f"{source}: expected a top-level 'questions:' list")
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    users: dict[str, Principal] = {}
    for index, item in enumerate(data["questions"], start=1):
        where = f"{source}: question #{index}"
        if not isinstance(item, Mapping):
            raise EvalDataError(f"{where}: expected a mapping with 'id' and 'question'")
        if item.get("id") is None or not isinstance(item.get("question"), str) or not item["question"].strip():
            raise EvalDataError(f"{where}: needs an 'id' and a non-empty 'question'")
        qid = str(item["id"])
        if qid in queries:
            raise EvalDataError(f"{where}: duplicate id {qid!r}")
        queries[qid] = item["question"]
        qrels[qid] = _parse_relevant(item.get("relevant"), f"{where} ({qid})")
        user = _parse_user(item.get("user"), f"{where} ({qid})")
        if user is not None:
            users[qid] = user
    return EvalSet(queries=queries, qrels=qrels, users=users, name=source.stem)
