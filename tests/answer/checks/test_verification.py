"""Verification of a draft in code: evidence in the cited source, numbers and identifiers sourced."""

from __future__ import annotations

from enterprise_rag.answer.checks.draft import Draft
from enterprise_rag.answer.checks.verification import verify_draft

SOURCES = {
    "S1": "| Meter size | Capacity charge |\n| 40 mm | $15,480 |\n\nYou **don\u2019t** have to pre-approve trips of "
    "$500 or less.",
    "S2": "Station KV-PS-0471 has a duty capacity of 85 L/s. Its pumps are reviewed every 24 months.",
}


def kept(answer: str, question: str = "What applies?") -> list[str]:
    return [s.render() for s in verify_draft(Draft.from_reply(answer), SOURCES, question).kept.sentences]


def test_a_negative_fact_with_its_citation_is_kept_with_its_evidence() -> None:
    checked = verify_draft(Draft.from_reply("You don't have to pre-approve trips of $500 or less. [S1]"), SOURCES,
                           "Do I need approval for a $300 trip?")  # fmt: skip
    (sentence,) = checked.kept.sentences
    assert not checked.problems and "pre-approve trips" in sentence.quotes[0].text


def test_an_uncited_sentence_with_an_invented_amount_fails() -> None:
    checked = verify_draft(Draft.from_reply("The connection fee is $9,000 for every meter."), SOURCES, "Fee?")
    assert checked.kept.not_found and "cites no source" in checked.feedback()


def test_a_number_or_identifier_of_no_cited_source_fails() -> None:
    answer = "KV-PS-0471 has a duty capacity of 85 L/s. [S2] At peak the station delivers 90 L/s of duty capacity. [S2]"
    assert kept(answer) == ["KV-PS-0471 has a duty capacity of 85 L/s. [S2]"]
    assert kept("KV-PS-0417 has a duty capacity of 85 L/s. [S2]") == []
    # the question's own identifier and numbers may be repeated
    assert kept("KV-PS-0417 has no duty capacity listed; KV-PS-0471 has 85 L/s. [S2]", "Is KV-PS-0417 listed?") != []


def test_identifiers_compare_without_punctuation_but_never_across_digits() -> None:
    assert kept("The pumps at KV PS 0471 are reviewed on a 24-month cycle. [S2]") != []
    assert kept("The pumps at KV-PS-0417 are reviewed every 24 months. [S2]") == []


def test_a_sentence_its_source_does_not_hold_moves_to_the_one_that_does_or_fails() -> None:
    checked = verify_draft(Draft.from_reply("Station KV-PS-0471 has a duty capacity of 85 L/s. [S1]"), SOURCES, "?")
    assert [s.labels for s in checked.kept.sentences] == [["S2"]] and checked.relabelled == 1
    ungrounded = verify_draft(Draft.from_reply("Meters are read by drones every winter season. [S1]"), SOURCES, "?")
    assert ungrounded.kept.not_found and "is not what [S1] says" in ungrounded.feedback()


def test_connecting_words_need_no_source_but_are_no_answer_alone() -> None:
    assert kept("The charges are:\n- 40 mm: $15,480 [S1]") == ["The charges are:", "40 mm: $15,480 [S1]"]
    assert kept("Here is what I found:") == []
