"""The support verdict over judged claims, and usefulness read from the evidence."""

from __future__ import annotations

from enterprise_rag.answer.checks.support import UNKNOWN, usefulness, verdict


def test_no_claim_judged_is_unknown() -> None:
    assert verdict(0, []) == UNKNOWN


def test_scores_are_the_share_of_supported_claims() -> None:
    full = verdict(2, [])
    assert (full.label, full.score, full.unsupported_claims) == ("fully_supported", 1.0, [])
    half = verdict(1, ["Fees are waived."])
    assert (half.label, half.score, half.unsupported_claims) == ("partially_supported", 0.5, ["Fees are waived."])
    assert verdict(0, ["Fees are waived."]).label == "not_supported"


def test_usefulness_is_the_share_of_parts_answered_times_the_evidence() -> None:
    assert usefulness(1, 1, 0.8).to_dict() == {"label": "useful", "score": 0.8}
    assert usefulness(2, 1, 0.8).to_dict() == {"label": "partially_useful", "score": 0.4}
    assert usefulness(2, 0, 0.8).label == "not_useful"
