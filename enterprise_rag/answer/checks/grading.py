"""Relevance grading of retrieved passages from the grader model's probability of answering "yes".

Each passage is asked about in a call of its own that generates one token with
logprobs: p(yes) is the probability mass of "yes" over that of "yes" and "no"
(:meth:`LLMCaller.yes_probability`). Two thresholds per grader model, fitted on
labelled data (``workflow.grade_thresholds``, ``benchmarks/grading.py``), map it
to yes / partial / no; the probability is the grade's confidence. Nothing
overrules the model: not a passage's headings, not its similarity.

The prompt puts the rules and the question before the passage, so the calls of
one question share their prefix and a local server reads it once.

Passages whose dense similarity to the question is below the embedding model's
floor are rejected without a call. Probabilities are cached by (question,
passage content, model, prompt), and the thresholds are applied when a grade is
read, so a new threshold takes effect on cached passages too. A failed call, or
a reply with neither "yes" nor "no" among its likely first tokens, leaves the
passage ``ungraded`` (fail-open: a grading outage must not hide the documents);
after a failed call the question's remaining passages are not asked either.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict, dataclass
from typing import Literal

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeWithScore

from enterprise_rag.errors import LLMError
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.llm.prompts import grade_messages
from enterprise_rag.llm.untrusted import without_block_ids
from enterprise_rag.retrieval.windows import question_windows
from enterprise_rag.store import Database
from enterprise_rag.store.grade_cache import cached_grades, store_grades

logger = logging.getLogger(__name__)

GradeLabel = Literal["yes", "partial", "no", "ungraded"]
TOP_LOGPROBS = 10


@dataclass(frozen=True)
class Grade:
    node_id: str
    grade: GradeLabel
    reason: str
    confidence: float
    method: Literal["llm", "cache", "floor", "fail-open"]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def label(p_yes: float, thresholds: tuple[float, float]) -> GradeLabel:
    """yes at or above the upper threshold, partial at or above the lower one, else no."""
    partial, yes = thresholds
    return "yes" if p_yes >= yes else "partial" if p_yes >= partial else "no"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Grader:
    """Grades passages for a question; ``thresholds`` are (partial, yes) on p(yes), ``floor`` the dense
    similarity under which a passage is rejected without a call (None: no floor)."""

    def __init__(
        self,
        db: Database,
        caller: LLMCaller,
        *,
        thresholds: tuple[float, float],
        floor: float | None,
        passage_chars: int,
        embed_model: BaseEmbedding | None = None,
    ) -> None:
        self._db = db
        self._embed_model = embed_model
        self._caller = caller
        self._thresholds = thresholds
        self._floor = floor
        self._passage_chars = passage_chars

    def grade(self, question: str, nodes: list[NodeWithScore]) -> list[Grade]:
        """Grades in the order of ``nodes``."""
        # The prompt and how passages are cut to fit it are part of the key: a change must not reuse old grades.
        view = "dense+codes" if self._embed_model is not None else "words"
        prompt = without_block_ids("".join(m.content or "" for m in grade_messages("{question}", "{passage}")))
        model = f"{self._caller.model_id('grader')}|p-yes|{_digest(prompt)[:12]}|{view}"
        qhash = _digest(question.strip())
        grades: dict[str, Grade] = {}
        to_grade: list[NodeWithScore] = []
        for n in nodes:
            similarity = n.node.metadata.get("similarity")
            if self._floor is not None and similarity is not None and similarity < self._floor:
                grades[n.node.node_id] = Grade(n.node.node_id, "no", f"similarity {similarity:.2f} below floor",
                                               1.0, "floor")  # fmt: skip
            else:
                to_grade.append(n)
        grades.update(self._cached(qhash, model, to_grade))
        pending = [n for n in to_grade if n.node.node_id not in grades]
        if pending:
            grades.update(self._ask(question, pending))
            self._store(qhash, model, [n for n in pending if grades[n.node.node_id].method == "llm"], grades)
        return [grades[n.node.node_id] for n in nodes]

    def _from_probability(self, node_id: str, p_yes: float, method: Literal["llm", "cache"]) -> Grade:
        return Grade(node_id, label(p_yes, self._thresholds), f"p(yes)={p_yes:.2f}", p_yes, method)

    def _ask(self, question: str, nodes: list[NodeWithScore]) -> dict[str, Grade]:
        """One call per passage, in order (the shared prefix stays in the server's cache)."""
        out: dict[str, Grade] = {}
        for n, window in zip(nodes, self._windows(question, nodes), strict=True):
            nid = n.node.node_id
            crumb = n.node.metadata.get("breadcrumb") or n.node.metadata.get("title") or ""
            messages = grade_messages(question, f"{crumb}\n{window}".strip())
            try:
                p_yes = self._caller.yes_probability("grader", "grade", messages, top_logprobs=TOP_LOGPROBS)
            except LLMError as exc:
                logger.warning("grading failed, keeping the remaining passages ungraded: %s", exc)
                for rest in nodes:
                    out.setdefault(rest.node.node_id, Grade(rest.node.node_id, "ungraded", "grading failed", 0.0,
                                                            "fail-open"))  # fmt: skip
                return out
            if p_yes is None:
                out[nid] = Grade(nid, "ungraded", "neither yes nor no among the likely replies", 0.0, "fail-open")
            else:
                out[nid] = self._from_probability(nid, p_yes, "llm")
        return out

    def _windows(self, question: str, nodes: list[NodeWithScore]) -> list[str]:
        return question_windows(question, [n.node.get_content() for n in nodes], self._passage_chars,
                                self._embed_model)  # fmt: skip

    def _cached(self, qhash: str, model: str, nodes: list[NodeWithScore]) -> dict[str, Grade]:
        """Cached probabilities, labelled with the current thresholds."""
        if not nodes:
            return {}
        by_hash = {_digest(n.node.get_content()): n.node.node_id for n in nodes}
        with self._db.connection() as conn:
            stored = cached_grades(conn, qhash, model, list(by_hash))
        return {by_hash[h]: self._from_probability(by_hash[h], float(g["p_yes"]), "cache") for h, g in stored.items()}

    def _store(self, qhash: str, model: str, nodes: list[NodeWithScore], grades: dict[str, Grade]) -> None:
        if not nodes:
            return
        entries = [(_digest(n.node.get_content()), grades[n.node.node_id]) for n in nodes]
        payloads = [(h, {"p_yes": g.confidence, "grade": g.grade, "reason": g.reason}) for h, g in entries]
        with self._db.connection() as conn:
            store_grades(conn, qhash, model, payloads)
