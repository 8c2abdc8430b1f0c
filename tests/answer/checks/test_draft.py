"""The review of a draft in code: repaired citations, what a revision is asked for, what a second opinion must pass."""

from __future__ import annotations

from enterprise_rag.answer.checks.draft import review_draft

SOURCES = {
    "S1": "Refunds for annual plans are available within 30 days of the renewal date.",
    "S2": "Refunds go back to the original payment method within five business days.",
}
QUESTION = "How are refunds for annual plans handled?"
COPIED = "Refunds for annual plans are available within 30 days of the renewal date."


def test_a_copied_sentence_without_a_label_gets_its_source_and_passes() -> None:
    review = review_draft(f"{COPIED} Refunds go back to the original payment method. [S2]", SOURCES, QUESTION,
                          second_opinion=False)  # fmt: skip
    assert review.answer.startswith(f"{COPIED} [S1]") and review.attributed == 1
    assert not review.needs_revision and review.feedback() == "" and review.to_trace()["ok"] is True


def test_an_unknown_label_or_an_ungrounded_sentence_asks_for_a_revision() -> None:
    unknown = review_draft(f"{COPIED} [S7]", SOURCES, QUESTION, second_opinion=False)
    assert unknown.needs_revision and "[S7]" in unknown.feedback()
    invented = "The customer also receives a voucher worth ten percent of the annual plan fee. [S2]"
    ungrounded = review_draft(f"{COPIED} [S1] {invented}", SOURCES, QUESTION, second_opinion=False)
    assert ungrounded.ungrounded == [invented] and ungrounded.needs_revision
    assert "is not what its cited source says" in ungrounded.feedback()


def test_a_second_opinion_loses_its_padding_and_is_unfit_with_an_invented_number() -> None:
    padded = review_draft(f"Good question, here is what I found out for you. {COPIED} [S1]", SOURCES, QUESTION,
                          second_opinion=True)  # fmt: skip
    assert padded.answer == f"{COPIED} [S1]" and padded.fit_as_second_opinion
    ordinary = review_draft(f"{COPIED} [S1] Refunds arrive within 45 days. [S2]", SOURCES, QUESTION,
                            second_opinion=False)  # fmt: skip
    assert ordinary.invented_numbers == []  # numbers are only counted for a second opinion
    second = review_draft(f"{COPIED} [S1] Refunds arrive within 45 days. [S2]", SOURCES, QUESTION,
                          second_opinion=True)  # fmt: skip
    assert second.invented_numbers == ["45"] and not second.fit_as_second_opinion


def test_a_left_out_part_of_a_two_part_question_asks_for_a_revision_naming_it() -> None:
    sources = {
        "S1": "Total score | Band | Suggested next step\n18-24 | Practitioner | Strengthen your lowest dimension."
    }
    question = "My reflection scored 21. Which band is that, and what should I do next?"
    band_only = review_draft("A score of 21 is in the Practitioner band. [S1]", sources, question, second_opinion=False)
    assert band_only.unanswered == ["what should I do next?"] and band_only.needs_revision
    assert "does not address this part of the question: what should I do next?" in band_only.feedback()
    both = "A score of 21 is in the Practitioner band. [S1] Next, strengthen your lowest dimension. [S1]"
    assert review_draft(both, sources, question, second_opinion=False).unanswered == []
    # never asked of a second opinion, which is kept or dropped but not revised
    assert review_draft("A score of 21 is in the Practitioner band. [S1]", sources, question,
                        second_opinion=True).unanswered == []  # fmt: skip


def test_a_second_opinion_saying_the_sources_lack_the_answer_is_unfit_whatever_it_kept() -> None:
    sources = {"S1": "Northwind Finance reimburses reasonable costs that employees incur while doing their jobs."}
    padded = (
        "[S1] Northwind Finance is a company that reimburses costs. The CEO of Northwind Finance is not listed in "
        "the provided information. The sources do not provide any information about the current CEO."
    )
    review = review_draft(padded, sources, "Who is the CEO of Northwind Finance?", second_opinion=True)
    assert review.admits_not_found and not review.fit_as_second_opinion
    first_draft = review_draft(padded, sources, "Who is the CEO of Northwind Finance?", second_opinion=False)
    assert not first_draft.admits_not_found  # a first draft may say what the sources lack next to what they say
