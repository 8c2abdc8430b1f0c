"""The draft: not found only when the whole reply is the not-found answer, never for a phrase inside one."""

from __future__ import annotations

from enterprise_rag.answer.checks.draft import Draft, Quote, Sentence
from enterprise_rag.llm.prompts import NOT_FOUND_ANSWER


def test_not_found_is_the_whole_reply_never_a_phrase_inside_an_answer() -> None:
    assert Draft.from_reply(NOT_FOUND_ANSWER).not_found
    assert Draft.from_reply(f' "{NOT_FOUND_ANSWER.rstrip(".")}" ').not_found  # quotes and period do not matter
    negative = Draft.from_reply("You don't have to pre-approve trips of $500 or less. [S1]")
    assert not negative.not_found  # "don't have" is a fact here, not a refusal
    assert not Draft.from_reply(f"{NOT_FOUND_ANSWER} But fees are 2%.").not_found  # an answer, checked as one
    assert Draft.from_reply("[S1] [S2] - ").not_found  # nothing but markup


def test_sentences_keep_their_labels_lose_list_markers_and_render_cited() -> None:
    draft = Draft.from_reply("1. Refunds take 14 days [S1][s2].")
    assert draft.sentences == (Sentence("Refunds take 14 days.", (Quote("S1", ""), Quote("S2", ""))),)
    assert draft.render() == "Refunds take 14 days. [S1][S2]"


def test_many_short_sentences_render_as_a_list_after_their_intro_line() -> None:
    draft = Draft.from_reply("The steps are:\n" + "\n".join(f"{i}. Step {i} is done. [S1]" for i in range(1, 5)))
    assert draft.render().splitlines()[:2] == ["The steps are:", "- Step 1 is done. [S1]"]
    short = Draft.from_reply("Refunds take 14 days. [S1] Fees are waived. [S2]")
    assert short.render() == "Refunds take 14 days. [S1] Fees are waived. [S2]"
