"""Relevance grading of a question's sources from the grader model's probability of answering "yes".

Each source is asked about in a call of its own that generates one token with
logprobs: p(yes) is the probability mass of "yes" over that of "yes" and "no"
(:meth:`LLMCaller.yes_probability`). Two thresholds per grader model, fitted on
labelled data (``workflow.grade_thresholds``, ``benchmarks/grading.py``), map it
to yes / partial / no; the probability is the grade's confidence. Nothing
overrules the model: not a passage's headings, not its similarity.

The calls start with generation's own prefix, the rules and the numbered sources
(:func:`~enterprise_rag.llm.prompts.grade_messages`), and name the source they ask
about after it: a local server with a prompt cache reads the sources once for
every grade of a question and for the answer written from them.

Passages whose dense similarity to the question is below the embedding model's
floor are rejected without a call (:meth:`Grader.under_floor`). Probabilities are
cached by (question, source text, model, prompt), and the thresholds are applied
when a grade is read, so a new threshold takes effect on cached sources too. A
failed call, or a reply with neither "yes" nor "no" among its likely first
tokens, leaves the source ``ungraded`` (fail-open: a grading outage must not hide
the documents); after a failed call the question's remaining sources are not
asked either.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from llama_index.core.schema import NodeWithScore

from enterprise_rag.errors import LLMError
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.llm.prompts import grade_messages
from enterprise_rag.llm.untrusted import without_block_ids
from enterprise_rag.schema.sources import Source
from enterprise_rag.store import Database
from enterprise_rag.store.grade_cache import cached_grades, store_grades

logger = logging.getLogger(__name__)

GradeLabel = Literal["yes", "partial", "no", "ungraded"]
TOP_LOGPROBS = 10
_OUTAGE = "grading failed"


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
    """Grades the sources of a question; ``thresholds`` are (partial, yes) on p(yes), ``floor`` the dense
    similarity under which a passage is rejected without a call (None: no floor)."""

    def __init__(
        self, db: Database, caller: LLMCaller, *, thresholds: tuple[float, float], floor: float | None
    ) -> None:
        self._db = db
        self._caller = caller
        self._thresholds = thresholds
        self._floor = floor

    def under_floor(self, nodes: list[NodeWithScore]) -> tuple[list[Grade], list[NodeWithScore]]:
        """A "no" for each passage under the similarity floor (no call), and the passages left to grade."""
        rejected, rest = [], []
        for n in nodes:
            similarity = n.node.metadata.get("similarity")
            if self._floor is not None and similarity is not None and similarity < self._floor:
                rejected.append(Grade(n.node.node_id, "no", f"similarity {similarity:.2f} below floor", 1.0, "floor"))
            else:
                rest.append(n)
        return rejected, rest

    def grade_best(
        self,
        question: str,
        nodes: list[NodeWithScore],
        limit: int,
        sources_of: Callable[[list[NodeWithScore]], list[Source]],
        carried: Sequence[NodeWithScore] = (),
    ) -> list[Grade]:
        """Grades of ``nodes`` (in any order), asked over the sources generation would read if every passage
        asked about were kept: the best ``limit`` by retrieval score of ``carried`` (passages kept in earlier
        rounds) and of ``nodes`` not yet graded no. Asked again while that set holds a passage not yet asked
        about, so the last set, when all of it is kept, is generation's prompt prefix too; nodes that cannot
        enter it are not asked about. After an outage the rest are left ungraded without a call."""
        kept, pending = list(carried), {n.node.node_id: n for n in nodes}
        grades: list[Grade] = []
        while best := sorted(kept + list(pending.values()), key=lambda n: -(n.score or 0.0))[:limit]:
            asked = [n for n in best if n.node.node_id in pending]
            if not asked:
                break
            by_id = {g.node_id: g for g in self.grade(question, sources_of(best))}
            for n in asked:
                del pending[n.node.node_id]
                grades.append(grade := by_id[n.node.node_id])
                if grade.grade in ("yes", "partial"):
                    kept.append(n)
            if any(g.reason == _OUTAGE for g in grades):
                grades += [Grade(n.node.node_id, "ungraded", _OUTAGE, 0.0, "fail-open") for n in pending.values()]
                break
        return grades

    def grade(self, question: str, sources: list[Source]) -> list[Grade]:
        """A grade for each corpus source, in order; every call starts with these sources, as generation does."""
        # The prompt is part of the key: a change of wording must not reuse old grades.
        prompt = without_block_ids("".join(m.content or "" for m in grade_messages([], "S1", "{question}")))
        model = f"{self._caller.model_id('grader')}|p-yes|{_digest(prompt)[:12]}|shared-sources"
        qhash = _digest(question.strip())
        corpus = [s for s in sources if s.kind == "corpus"]
        grades = self._cached(qhash, model, corpus)
        pending = [s for s in corpus if s.node_id not in grades]
        if pending:
            grades.update(self._ask(question, sources, pending))
            self._store(qhash, model, [s for s in pending if grades[s.node_id].method == "llm"], grades)
        return [grades[s.node_id] for s in corpus]

    def _from_probability(self, node_id: str, p_yes: float, method: Literal["llm", "cache"]) -> Grade:
        return Grade(node_id, label(p_yes, self._thresholds), f"p(yes)={p_yes:.2f}", p_yes, method)

    def _ask(self, question: str, sources: list[Source], pending: list[Source]) -> dict[str, Grade]:
        """One call per source, in order, each over the same sources (the server reads them once)."""
        out: dict[str, Grade] = {}
        for source in pending:
            nid = source.node_id
            messages = grade_messages(sources, source.label, question)
            try:
                p_yes = self._caller.yes_probability("grader", "grade", messages, top_logprobs=TOP_LOGPROBS)
            except LLMError as exc:
                logger.warning("grading failed, keeping the remaining sources ungraded: %s", exc)
                for rest in pending:
                    out.setdefault(rest.node_id, Grade(rest.node_id, "ungraded", _OUTAGE, 0.0, "fail-open"))
                return out
            if p_yes is None:
                out[nid] = Grade(nid, "ungraded", "neither yes nor no among the likely replies", 0.0, "fail-open")
            else:
                out[nid] = self._from_probability(nid, p_yes, "llm")
        return out

    def _cached(self, qhash: str, model: str, sources: list[Source]) -> dict[str, Grade]:
        """Cached probabilities, labelled with the current thresholds."""
        if not sources:
            return {}
        by_hash = {_digest(s.text): s.node_id for s in sources}
        with self._db.connection() as conn:
            stored = cached_grades(conn, qhash, model, list(by_hash))
        return {by_hash[h]: self._from_probability(by_hash[h], float(g["p_yes"]), "cache") for h, g in stored.items()}

    def _store(self, qhash: str, model: str, sources: list[Source], grades: dict[str, Grade]) -> None:
        if not sources:
            return
        entries = [(_digest(s.text), grades[s.node_id]) for s in sources]
        payloads = [(h, {"p_yes": g.confidence, "grade": g.grade, "reason": g.reason}) for h, g in entries]
        with self._db.connection() as conn:
            store_grades(conn, qhash, model, payloads)
