"""Evidence grading: the grader model's probability of "yes" that a quoted line answers the question.

The best units of the question's sources (:mod:`enterprise_rag.answer.checks.candidates`) are each
asked about in a call of its own that quotes the unit right before the task and generates one token
with logprobs over the question's shared prefix (the rules and the sources), so a local server reads
the sources once for every judgement and for the answer written from them. p(yes) is the probability
mass of "yes" over that of "yes" and "no" (:meth:`LLMCaller.yes_probability`). Two thresholds per
grader model, fitted on the dev data (``workflow.grade_thresholds``), map it to yes / partial / no: a
unit at or above ``partial`` is evidence, a question with a unit at or above ``yes`` has strong
evidence (no step is then offered a refusal). A passage's grade is its best unit's. Nothing overrules
the model: not a passage's headings, not its similarity.

Passages whose dense similarity to the question is below the embedding model's floor are rejected
without a call (:meth:`Grader.under_floor`). Probabilities are cached by (question, unit text, model,
prompt), and the thresholds are applied when a grade is read, so a new threshold takes effect on cached
units too. A failed call, or a reply with neither "yes" nor "no" among its likely first tokens, leaves
the unit ``ungraded`` (fail-open: a grading outage must not hide the documents, and an ungraded unit
counts as evidence); after a failed call the question's remaining units are not asked either.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from llama_index.core.schema import NodeWithScore

from enterprise_rag.answer.checks.candidates import Evidence
from enterprise_rag.errors import LLMError, brief
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.llm.prompts import evidence_messages
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
    """The grade of a passage (``node_id``) or of one evidence unit (``node_id`` is then the unit's key)."""

    node_id: str
    grade: GradeLabel
    reason: str
    confidence: float
    method: Literal["llm", "cache", "floor", "fail-open", "unasked"]

    @property
    def evidence(self) -> bool:
        """Good enough to answer from: yes, partial, or ungraded (fail-open)."""
        return self.grade in ("yes", "partial", "ungraded")

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def label(p_yes: float, thresholds: tuple[float, float]) -> GradeLabel:
    """yes at or above the upper threshold, partial at or above the lower one, else no."""
    partial, yes = thresholds
    return "yes" if p_yes >= yes else "partial" if p_yes >= partial else "no"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class ProbabilityCache:
    """Judgements (JSON objects) of texts in the grade cache, keyed by (``scope``, text, ``model``): ``model``
    names the model, the judgement and a digest of its prompt's wording, so a new wording asks again."""

    def __init__(self, db: Database, model: str, prompt: str, *, scope: str = "") -> None:
        self._db = db
        self._model = f"{model}|{_digest(without_block_ids(prompt))[:12]}"
        self._scope = _digest(scope.strip())

    def get(self, texts: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The stored judgements of ``texts``, by text."""
        if not texts:
            return {}
        by_hash = {_digest(t): t for t in texts}
        with self._db.connection() as conn:
            stored = cached_grades(conn, self._scope, self._model, list(by_hash))
        return {by_hash[h]: g for h, g in stored.items()}

    def put(self, judged: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Store ``(text, judgement)`` pairs; a text already stored keeps its first judgement."""
        if judged:
            with self._db.connection() as conn:
                store_grades(conn, self._scope, self._model, [(_digest(t), g) for t, g in judged])


class Grader:
    """Grades the evidence units of a question; ``thresholds`` are (partial, yes) on p(yes), ``floor`` the dense
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

    def grade_units(self, question: str, sources: list[Source], units: Sequence[Evidence]) -> list[Grade]:
        """A grade for each unit, in order; every call starts with ``sources``, as generation does."""
        return self.grade_texts(question, sources, [u.key for u in units])

    def grade_texts(self, question: str, sources: list[Source], texts: Sequence[str]) -> list[Grade]:
        """A grade for each text (a unit's, or an answer's), in order, each keyed by its text."""
        # The prompt is part of the key: a change of wording must not reuse old grades.
        prompt = "".join(m.content or "" for m in evidence_messages([], "{question}", "{line}"))
        cache = ProbabilityCache(self._db, f"{self._caller.model_id('grader')}|p-yes|evidence", prompt, scope=question)
        stored = cache.get(list(texts))
        grades = {k: self._from_probability(k, float(g["p_yes"]), "cache") for k, g in stored.items()}
        pending = list(dict.fromkeys(t for t in texts if t not in grades))
        if pending:
            grades.update(self._ask(question, sources, pending))
            cache.put([(t, {"p_yes": grades[t].confidence, "grade": grades[t].grade, "reason": grades[t].reason})
                       for t in pending if grades[t].method == "llm"])  # fmt: skip
        return [grades[t] for t in texts]

    def passage_grades(self, sources: list[Source], units: Sequence[Evidence], grades: Sequence[Grade]) -> list[Grade]:
        """Each corpus source's grade: that of its best unit; "no" (unasked) when none of its units was asked."""
        out = []
        for source in sources:
            if source.kind != "corpus":
                continue
            own = [g for u, g in zip(units, grades, strict=True) if u.label == source.label]
            if not own:
                out.append(Grade(source.node_id, "no", "no line among the best of the question", 0.0, "unasked"))
                continue
            best = max(own, key=lambda g: (g.grade == "ungraded", g.confidence))
            out.append(Grade(source.node_id, best.grade, best.reason, best.confidence, best.method))
        return out

    def _from_probability(self, key: str, p_yes: float, method: Literal["llm", "cache"]) -> Grade:
        return Grade(key, label(p_yes, self._thresholds), f"p(yes)={p_yes:.2f}", p_yes, method)

    def _ask(self, question: str, sources: list[Source], pending: list[str]) -> dict[str, Grade]:
        """One call per text, in order, each over the same sources (the server reads them once)."""
        out: dict[str, Grade] = {}
        for text in pending:
            messages = evidence_messages(sources, question, text)
            try:
                p_yes = self._caller.yes_probability("grader", "grade", messages, top_logprobs=TOP_LOGPROBS)
            except LLMError as exc:
                logger.warning("grading failed, keeping the remaining evidence ungraded: %s", brief(exc))
                logger.debug("grading: %s", exc)
                for rest in pending:
                    out.setdefault(rest, Grade(rest, "ungraded", _OUTAGE, 0.0, "fail-open"))
                return out
            if p_yes is None:
                out[text] = Grade(text, "ungraded", "neither yes nor no among the likely replies", 0.0, "fail-open")
            else:
                out[text] = self._from_probability(text, p_yes, "llm")
        return out
