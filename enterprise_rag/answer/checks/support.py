"""Support (hallucination) and usefulness labels from the grader's claim check."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SupportVerdict:
    label: str  # fully_supported | partially_supported | not_supported | unknown | not_applicable
    score: float
    unsupported_claims: list[str] = field(default_factory=list)
    answers_question: bool = True

    def passed(self, threshold: float) -> bool:
        return self.label != "unknown" and self.score >= threshold

    def to_support_dict(self) -> dict[str, Any]:
        return {"label": self.label, "score": self.score, "unsupported_claims": list(self.unsupported_claims)}

    def to_usefulness_dict(self) -> dict[str, Any]:
        if self.label == "unknown":
            return {"label": "unknown", "score": 0.0}
        return {"label": "useful" if self.answers_question else "not_useful",
                "score": 1.0 if self.answers_question else 0.0}  # fmt: skip


def verdict_from_check(reply: dict[str, Any]) -> SupportVerdict:
    claims = reply.get("claims") or []
    total = len(claims)
    unsupported = [str(c["claim"]) for c in claims if not c.get("supported")]
    score = 1.0 if total == 0 else round((total - len(unsupported)) / total, 3)
    label = "fully_supported" if not unsupported else "not_supported" if score == 0 else "partially_supported"
    return SupportVerdict(label, score, unsupported, bool(reply.get("answers_question", True)))


UNKNOWN = SupportVerdict("unknown", 0.0, [], False)
NOT_APPLICABLE = SupportVerdict("not_applicable", 1.0, [], True)
