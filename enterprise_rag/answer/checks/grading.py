"""Relevance grading of retrieved passages: one batched grader call for all of them.

Passages whose dense similarity to the question is below a floor are rejected
without a call; grades are cached by (question, passage content, model); a
failed or incomplete grading call keeps the passages, marked ``ungraded``
(fail-open: a grading outage must not hide the documents).

A small grader model is unreliable in one direction above all: it answers
"none"/"no" for every passage of a batch, the answering one included. A "no"
is therefore downgraded to ``partial`` (never upgraded to yes) where retrieval
has strong evidence of its own: a dense similarity at or above ``keep_similarity``,
or a heading that names an identifier of the question (a code such as AB-123), which
embeddings barely tell from its neighbours, or an acronym of it (a small grader
can say no to every section of a guide named after what the question asks
about). The passage reaches the generator, which still says
plainly when it holds no answer.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeWithScore

from enterprise_rag.errors import LLMError
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.llm.prompts import GRADE_RULES, grade_messages, grade_schema
from enterprise_rag.retrieval.windows import focus, paragraphs
from enterprise_rag.store import Database
from enterprise_rag.store.grade_cache import cached_grades, store_grades
from enterprise_rag.text import is_heading, names, query_words

logger = logging.getLogger(__name__)

GradeLabel = Literal["yes", "partial", "no", "ungraded"]


@dataclass(frozen=True)
class Grade:
    node_id: str
    grade: GradeLabel
    reason: str
    confidence: float
    method: Literal["llm", "cache", "floor", "similarity", "identifier", "fail-open"]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def headings(node: NodeWithScore) -> str:
    """A passage's breadcrumb and its own heading lines: what it says it is about."""
    lines = [line for line in node.node.get_content().splitlines() if is_heading(line)]
    return "\n".join([str(node.node.metadata.get("breadcrumb") or ""), *lines])


def evidence_found(evidence: str, passage: str) -> bool:
    """Whether the quoted evidence really is in the passage (small models invent it)."""
    words = [w for w in query_words(evidence) if len(w) > 2]
    if not words or evidence.strip().lower() in ("none", "n/a", ""):
        return False
    present = set(query_words(passage))
    return sum(1 for w in words if w in present) / len(words) >= 0.6


def _from_reply(node_id: str, item: dict[str, str], passage: str) -> Grade:
    """yes only with evidence found in the passage; a claimed answer without it is partial."""
    evidence = str(item["evidence"])[:200]
    if item["answers"] == "no":
        return Grade(node_id, "no", evidence, 0.8, "llm")
    if evidence_found(evidence, passage):
        return Grade(node_id, "yes", evidence, 0.9, "llm")
    return Grade(node_id, "partial", f"evidence not found in passage: {evidence}", 0.5, "llm")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Grader:
    def __init__(
        self,
        db: Database,
        caller: LLMCaller,
        *,
        floor: float,
        keep_similarity: float,
        passage_chars: int,
        embed_model: BaseEmbedding | None = None,
    ) -> None:
        self._db = db
        self._embed_model = embed_model
        self._caller = caller
        self._floor = floor
        self._keep_similarity = keep_similarity
        self._passage_chars = passage_chars

    def grade(self, question: str, nodes: list[NodeWithScore]) -> list[Grade]:
        """Grades in the order of ``nodes``."""
        # The prompt and how passages are cut to fit it are part of the key: a change must not reuse old grades.
        view = ("dense+codes" if self._embed_model is not None else "words") + "+withheld"
        model = f"{self._caller.model_id('grader')}|{_digest(GRADE_RULES)[:12]}|{view}"
        qhash = _digest(question.strip().lower())
        grades: dict[str, Grade] = {}
        to_grade: list[NodeWithScore] = []
        for n in nodes:
            similarity = n.node.metadata.get("similarity")
            if similarity is not None and similarity < self._floor:
                grades[n.node.node_id] = Grade(n.node.node_id, "no", f"similarity {similarity:.2f} below floor",
                                               1.0, "floor")  # fmt: skip
            else:
                to_grade.append(n)
        cached = self._cached(qhash, model, to_grade)
        grades.update(cached)
        pending = [n for n in to_grade if n.node.node_id not in cached]
        if pending:
            fresh = self._ask(question, pending)
            grades.update(fresh)
            self._store(qhash, model, [n for n in pending if grades[n.node.node_id].method == "llm"], grades)
        asked = names(question)
        return [self._doubt_no(grades[n.node.node_id], n, asked) for n in nodes]

    def _doubt_no(self, grade: Grade, node: NodeWithScore, asked: set[str]) -> Grade:
        """A grader "no" on a strong dense match, or on a passage headed by an identifier or acronym the
        question names, becomes partial (see the module docstring)."""
        if grade.grade != "no" or grade.method == "floor":
            return grade
        similarity = node.node.metadata.get("similarity")
        named = sorted(asked & names(headings(node)))
        method: Literal["identifier", "similarity"]
        if named:
            evidence, method = f"its heading names {', '.join(named)}", "identifier"
        elif similarity is not None and similarity >= self._keep_similarity:
            evidence, method = f"similarity {similarity:.2f} >= {self._keep_similarity:.2f}", "similarity"
        else:
            return grade
        reason = f"grader said no ({grade.reason[:120]}), but {evidence}"
        return Grade(grade.node_id, "partial", reason, 0.4, method)

    def _ask(self, question: str, nodes: list[NodeWithScore]) -> dict[str, Grade]:
        ids = {f"P{i}": n.node.node_id for i, n in enumerate(nodes, 1)}
        passages = []
        for pid, n, window in zip(ids, nodes, self._windows(question, nodes), strict=True):
            crumb = n.node.metadata.get("breadcrumb") or n.node.metadata.get("title") or ""
            passages.append((pid, f"{crumb}\n{window}".strip()))
        try:  # a small model pretty-prints: ~50 tokens per passage with an 80-character evidence
            reply = self._caller.call(
                "grader", "grade", grade_messages(question, passages), max_tokens=64 * len(nodes) + 32,
                schema=grade_schema(list(ids)),
            )  # fmt: skip
        except LLMError as exc:
            logger.warning("grading failed, keeping all passages ungraded: %s", exc)
            return {nid: Grade(nid, "ungraded", "grading failed", 0.0, "fail-open") for nid in ids.values()}
        texts = dict(passages)
        return {nid: _from_reply(nid, reply[pid], texts[pid]) for pid, nid in ids.items()}

    def _windows(self, question: str, nodes: list[NodeWithScore]) -> list[str]:
        """What the grader sees of each passage: long ones cut around their paragraph most similar to the
        question (one embedding batch for all of them), or by shared words without an embedding model.

        A paragraph holding a code of the question (a code such as AB-123, or a year) comes first: embeddings barely
        tell one error code from another, which is why search is hybrid too.
        """
        texts = [n.node.get_content() for n in nodes]
        long = {i: paragraphs(t) for i, t in enumerate(texts) if len(t) > self._passage_chars}
        if self._embed_model is None or not long:
            return [focus(question, t, self._passage_chars) for t in texts]
        flat = [p for parts in long.values() for p in parts]
        query = np.asarray(self._embed_model.get_query_embedding(question), dtype=np.float32)
        vectors = np.asarray(self._embed_model.get_text_embedding_batch(flat), dtype=np.float32)
        sims = (vectors @ query) / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query) + 1e-12)
        codes = {w for w in query_words(question) if len(w) > 2 and any(c.isdigit() for c in w)}
        boost = [1.0 if codes & set(query_words(p)) else 0.0 for p in flat]
        relevance: dict[int, Sequence[float]] = {}
        start = 0
        for i, parts in long.items():
            end = start + len(parts)
            relevance[i] = [float(sim) + b for sim, b in zip(sims[start:end], boost[start:end], strict=True)]
            start = end
        return [focus(question, t, self._passage_chars, relevance.get(i)) for i, t in enumerate(texts)]

    def _cached(self, qhash: str, model: str, nodes: list[NodeWithScore]) -> dict[str, Grade]:
        if not nodes:
            return {}
        by_hash = {_digest(n.node.get_content()): n.node.node_id for n in nodes}
        with self._db.connection() as conn:
            stored = cached_grades(conn, qhash, model, list(by_hash))
        return {
            by_hash[h]: Grade(by_hash[h], g["grade"], g["reason"], g["confidence"], "cache") for h, g in stored.items()
        }

    def _store(self, qhash: str, model: str, nodes: list[NodeWithScore], grades: dict[str, Grade]) -> None:
        if not nodes:
            return
        entries = [(_digest(n.node.get_content()), grades[n.node.node_id]) for n in nodes]
        payloads = [(h, {"grade": g.grade, "reason": g.reason, "confidence": g.confidence}) for h, g in entries]
        with self._db.connection() as conn:
            store_grades(conn, qhash, model, payloads)
