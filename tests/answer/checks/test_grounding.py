"""Grounding in code: cited sentences must be made of words their cited sources (or the question) hold."""

from __future__ import annotations

from enterprise_rag.answer.checks.attribution import reattribute_citations
from enterprise_rag.answer.checks.grounding import grounded_share, ungrounded_sentences

SOURCES = {
    "S1": "Refunds for annual plans are available within 30 days of the renewal date.",
    "S2": "Customers who move from an annual to a monthly subscription part-way through a term are handled the same "
    "way. Refunds go back to the original payment method.",
}
QUESTION = "What should I tell a customer who sees E-4120 when sending a payment?"


def test_copied_and_reworded_sentences_are_grounded() -> None:
    answer = (
        "Refunds for annual plans are available within 30 days of the renewal date. [S1] "
        "The money goes back to the original payment method. [S2]"
    )
    assert ungrounded_sentences(answer, SOURCES, "How do refunds work?") == []


def test_an_invention_citing_an_unrelated_source_is_ungrounded() -> None:
    invented = "It indicates that the payment was declined by the payment gateway. [S2]"
    answer = f"Refunds for annual plans are available within 30 days of the renewal date. [S1] {invented}"
    assert ungrounded_sentences(answer, SOURCES, QUESTION) == [invented]


def test_question_words_count_and_short_or_uncited_sentences_are_not_judged() -> None:
    assert grounded_share("Tell the customer who sees E-4120 when sending a payment. [S1]", SOURCES, QUESTION) == 1.0
    assert grounded_share("Yes, it is. [S1]", SOURCES, QUESTION) is None  # too few content words
    assert grounded_share("The moon is made of green cheese.", SOURCES, QUESTION) is None  # no citation


def test_a_sentence_copied_from_another_source_gets_that_label() -> None:
    answer = (
        "Refunds for annual plans are available within 30 days of the renewal date. [S1] Customers who move from "
        "an annual to a monthly subscription part-way through a term are handled the same way. [S1]"
    )
    fixed, moved = reattribute_citations(answer, SOURCES, "What is the refund policy for annual plans?")
    assert moved == 1 and fixed.endswith("handled the same way. [S2]") and fixed.count("[S1]") == 1
    assert ungrounded_sentences(fixed, SOURCES, "What is the refund policy?") == []


def test_an_invention_is_not_relabelled() -> None:
    answer = "It indicates that the payment was declined by the payment gateway. [S2]"
    assert reattribute_citations(answer, SOURCES, QUESTION) == (answer, 0)
