"""Support (hallucination) and usefulness labels from the verifier's claim check.

The claims are the answer's sentences, each already matched to verified quotes in code; the verifier
gives one required verdict per claim. It cannot pass on nothing: a check of no claim, or a reply
missing a verdict, is ``unknown``, which never passes (fail-closed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SupportVerdict:
    label: str  # fully_supported | partially_supported | not_supported | unknown | not_applicable
    score: float
    unsupported_claims: list[str] = field(default_factory=list)
    answers_question: bool = False

    def passed(self, threshold: float) -> bool:
        return self.label != "unknown" and self.score >= threshold

    def to_support_dict(self) -> dict[str, Any]:
        return {"label": self.label, "score": self.score, "unsupported_claims": list(self.unsupported_claims)}

    def to_usefulness_dict(self) -> dict[str, Any]:
        if self.label == "unknown":
            return {"label": "unknown", "score": 0.0}
        return {"label": "useful" if self.answers_question else "not_useful",
                "score": 1.0 if self.answers_question else 0.0}  # fmt: skip


UNKNOWN = SupportVerdict("unknown", 0.0, [], False)
NOT_APPLICABLE = SupportVerdict("not_applicable", 1.0, [], True)


def verdict_from_check(reply: Mapping[str, Any], claims: Mapping[str, str]) -> SupportVerdict:
    """The verdict of a check ``reply`` on ``claims`` (claim id -> sentence)."""
    if not claims or "answers_question" not in reply or any(not isinstance(reply.get(c), Mapping) for c in claims):
        return UNKNOWN
    unsupported = [text for cid, text in claims.items() if reply[cid].get("supported") is not True]
    score = round((len(claims) - len(unsupported)) / len(claims), 3)
    label = "fully_supported" if not unsupported else "not_supported" if score == 0 else "partially_supported"
    return SupportVerdict(label, score, unsupported, reply["answers_question"] is True)
