"""The parts of a many-part question, from its form alone."""

from __future__ import annotations

import pytest

from enterprise_rag.answer.checks.parts import answered_parts, question_parts


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
        ("Who? What? When? Where?", ["Who", "What", "When and Where"]),
    ],
)  # fmt: skip
def test_a_question_splits_at_question_marks_and_at_and_before_a_question_word(question: str, parts: list[str]) -> None:
    assert question_parts(question) == parts


def test_a_part_is_answered_by_text_about_what_it_alone_asks() -> None:
    parts = question_parts("What must a holder submit, and when is the review held?")
    assert answered_parts(parts, ["A holder submits an ID."]) == [True, False]
    assert answered_parts(parts, ["A holder submits an ID.", "The review is held in May."]) == [True, True]


def test_the_word_after_how_names_the_kind_of_answer_not_its_subject() -> None:
    parts = question_parts("What must a holder submit, and how long do they have?")
    assert answered_parts(parts, ["A holder submits two items within 30 days."]) == [True, True]
