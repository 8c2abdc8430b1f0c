"""The support verdict cannot pass on nothing: one verdict per claim, fail-closed."""

from __future__ import annotations

from enterprise_rag.answer.checks.support import UNKNOWN, verdict_from_check

CLAIMS = {"C1": "Refunds take 14 days.", "C2": "Fees are waived for members."}


def test_no_claim_or_a_missing_verdict_is_unknown_and_never_passes() -> None:
    assert verdict_from_check({"answers_question": True}, {}) == UNKNOWN
    assert verdict_from_check({"C1": {"supported": True}, "answers_question": True}, CLAIMS) == UNKNOWN
    assert verdict_from_check({"C1": {"supported": True}, "C2": {"supported": True}}, CLAIMS) == UNKNOWN
    assert not UNKNOWN.passed(0.0)


def test_scores_are_the_share_of_supported_claims() -> None:
    full = verdict_from_check({"C1": {"supported": True}, "C2": {"supported": True}, "answers_question": True}, CLAIMS)
    assert (full.label, full.score, full.answers_question) == ("fully_supported", 1.0, True)
    half = verdict_from_check({"C1": {"supported": True}, "C2": {}, "answers_question": False}, CLAIMS)
    assert (half.label, half.score, half.unsupported_claims) == ("partially_supported", 0.5, [CLAIMS["C2"]])
    assert not half.answers_question
