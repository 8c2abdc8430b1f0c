"""Support (hallucination) judged claim by claim, and usefulness, from the model's p(yes).

Each verified-in-code sentence is a claim; the judge is asked whether the claim's own spans state it,
in a call of its own that reads one token with logprobs over the question's shared prefix. The
prompt is neutral: it never says that the claim comes from an answer or that an answer exists. The
claim is supported when p(yes) reaches the judge model's threshold (``workflow.support_thresholds``,
fitted by ``benchmarks/grounding.py``). A reply with neither "yes" nor "no" among its likely first
tokens supports nothing (fail-closed); a failed call raises, and the workflow flags the answer.

Usefulness is read from the evidence, not asked again: an answer whose every question part has a
verified sentence is useful, one that answers some parts is partially useful; its score is the best
p(yes) of the evidence it rests on, times the share of parts answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from enterprise_rag.answer.checks.draft import Sentence
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.llm.prompts import support_messages
from enterprise_rag.schema.sources import Source

TOP_LOGPROBS = 10


@dataclass(frozen=True)
class SupportVerdict:
    label: str  # fully_supported | partially_supported | not_supported | unknown | not_applicable
    score: float
    unsupported_claims: list[str] = field(default_factory=list)

    def to_support_dict(self) -> dict[str, Any]:
        return {"label": self.label, "score": self.score, "unsupported_claims": list(self.unsupported_claims)}


UNKNOWN = SupportVerdict("unknown", 0.0, [])
NOT_APPLICABLE = SupportVerdict("not_applicable", 1.0, [])


def verdict(supported: int, unsupported: Sequence[str]) -> SupportVerdict:
    """The verdict over the claims judged: ``supported`` of them held, ``unsupported`` (their texts) did not."""
    total = supported + len(unsupported)
    if not total:
        return UNKNOWN
    score = round(supported / total, 3)
    label = "fully_supported" if not unsupported else "not_supported" if not supported else "partially_supported"
    return SupportVerdict(label, score, list(unsupported))


@dataclass(frozen=True)
class Usefulness:
    label: str  # useful | partially_useful | not_useful | unknown | not_found
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "score": self.score}


class Judge:
    """Asks the grader model whether spans support a claim."""

    def __init__(self, caller: LLMCaller, *, support_threshold: float) -> None:
        self._caller = caller
        self._support = support_threshold

    def support(self, sources: list[Source], sentence: Sentence) -> float:
        """p(yes) that the sentence's spans state it; 0.0 when the model says neither yes nor no. Raises
        :class:`~enterprise_rag.errors.LLMError` when the call fails (the caller fails closed)."""
        messages = support_messages(sources, list(sentence.spans), sentence.text)
        p = self._caller.yes_probability("grader", "support", messages, top_logprobs=TOP_LOGPROBS)
        return 0.0 if p is None else p

    def supported(self, p_yes: float) -> bool:
        return p_yes >= self._support


def usefulness(parts: int, answered: int, evidence: float) -> Usefulness:
    """Useful when every one of ``parts`` question parts is answered, partially useful when some are."""
    score = round(evidence * answered / max(1, parts), 3)
    if not answered:
        return Usefulness("not_useful", 0.0)
    return Usefulness("useful" if answered >= parts else "partially_useful", score)
