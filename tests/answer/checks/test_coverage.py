"""Which parts of a many-part question an answer leaves out (checked in code)."""

from __future__ import annotations

import pytest

from enterprise_rag.answer.checks.coverage import question_parts, unanswered_parts

KYC = "What does a new account holder have to submit for KYC, and how long do they have to do it?"
KYC_SOURCE = "Every new account holder must submit a photo ID and a proof of address within 30 days."


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        ("My reflection scored 21. Which band is that, and what should I do next?",
         ["Which band is that", "what should I do next"]),
        ("A merchant gets E-4012. What does it mean and how do they fix it?",
         ["What does it mean", "how do they fix it"]),
        ("Who is our auditor? When does the fiscal year end?", ["Who is our auditor", "When does the fiscal year end"]),
        ("Which fees and charges apply to wire transfers?", ["Which fees and charges apply to wire transfers"]),
        ("Tell me about refunds", ["Tell me about refunds"]),
    ],
)  # fmt: skip
def test_a_question_splits_at_question_marks_and_at_and_before_a_question_word(question: str, parts: list[str]) -> None:
    assert question_parts(question) == parts


def test_a_part_is_left_out_when_the_answer_shares_none_of_its_words_but_the_sources_do() -> None:
    answer = "They must submit a photo ID and a proof of address. [S1]"
    question, checks = "What must they submit, and which office checks the documents?", "The Office checks documents."
    assert unanswered_parts(question, answer, [checks]) == ["which office checks the documents?"]
    # nothing in the sources to add: the part is the usefulness check's business, not a revision's
    assert unanswered_parts("What must they submit, and which office checks it?", answer, ["Submit an ID."]) == []


def test_an_amount_or_a_time_is_answered_by_a_number_and_words_match_on_their_stem() -> None:
    with_days = "They must submit a photo ID and a proof of address within 30 days. [S1]"
    assert unanswered_parts(KYC, with_days, [KYC_SOURCE]) == []
    items_only = "They must submit a photo ID and a proof of address. [S1]"
    assert unanswered_parts(KYC, items_only, [KYC_SOURCE]) == []  # "how long do they have to do it": no word to miss
    rated = "There are six dimensions. [S1] Each gets a rating from 1 to 5. [S1]"
    assert unanswered_parts("What are the dimensions, and how is each one rated?", rated, ["rated from 1 to 5"]) == []


def test_only_an_answer_with_fewer_sentences_than_the_question_has_parts_is_reported() -> None:
    assert unanswered_parts("What should I do next?", "A score of 21 is Practitioner.", ["Suggested next step"]) == []
    question = "A merchant gets E-4012. What does it mean and how do they fix it?"
    sources = ["Meaning. The signing key expired. Fix. Rotate the key in the Partner Console."]
    assert (
        unanswered_parts(question, "The signing key expired. [S1] Rotate it in the Partner Console. [S1]", sources)
        == []
    )
    assert unanswered_parts(question, "It means the signing key expired. [S1]", sources) == ["how do they fix it?"]
