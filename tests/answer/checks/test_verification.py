"""Verification of a draft in code: quotes found in their sources, numbers and identifiers sourced."""

from __future__ import annotations

import pytest

from enterprise_rag.answer.checks.draft import Draft, Quote, Sentence
from enterprise_rag.answer.checks.verification import quote_found, verify_draft

SOURCES = {
    "S1": "| Meter size | Capacity charge |\n| 40 mm | $15,480 |\n\nYou **don\u2019t** have to pre-approve trips of "
    "$500 or less.",
    "S2": "Station KV-PS-0471 has a duty capacity of 85 L/s, reviewed every 24 months.",
}


def draft(*sentences: tuple[str, list[tuple[str, str]]]) -> Draft:
    return Draft(True, tuple(Sentence(t, tuple(Quote(label, q) for label, q in qs)) for t, qs in sentences))


@pytest.mark.parametrize(
    ("quote", "source", "found"),
    [
        ("40 mm | $15,480", SOURCES["S1"], True),  # table pipes and currency signs are not words
        ("don't have to pre-approve trips", SOURCES["S1"], True),  # curly apostrophe, Markdown emphasis
        ("DUTY   capacity of 85 l/s", SOURCES["S2"], True),  # case and whitespace
        ("capacity charge", SOURCES["S1"], False),  # too short to be evidence
        ("a duty capacity of 58 L/s", SOURCES["S2"], False),  # one number changed
        ("has a capacity of 85", SOURCES["S2"], False),  # words left out: not verbatim
    ],
)
def test_quote_found(quote: str, source: str, found: bool) -> None:
    assert quote_found(quote, source) is found


def test_a_negative_fact_with_its_quote_is_kept() -> None:
    checked = verify_draft(
        draft(("You don't have to pre-approve trips of $500 or less.", [("S1", "have to pre-approve trips of $500")])),
        SOURCES, "Do I need approval for a $300 trip?",
    )  # fmt: skip
    assert len(checked.kept.sentences) == 1 and not checked.problems and checked.quotes_found == 1


def test_an_uncited_sentence_with_an_invented_amount_fails() -> None:
    checked = verify_draft(draft(("The fee is $9,000.", [])), SOURCES, "What is the fee?")
    assert checked.kept.not_found and "no quote" in checked.feedback()


def test_a_number_or_identifier_of_no_cited_source_fails_even_with_a_real_quote() -> None:
    quote = [("S2", "has a duty capacity of 85 L/s")]
    checked = verify_draft(
        draft(("KV-PS-0417 has a duty capacity of 85 L/s.", quote), ("It holds 90 L/s at peak.", quote)),
        SOURCES, "What is the duty capacity of KV-PS-0417?",
    )  # fmt: skip
    # the question's own identifier may be repeated; a number in no cited source may not
    assert [s.text for s in checked.kept.sentences] == ["KV-PS-0417 has a duty capacity of 85 L/s."]
    assert [p.reasons for p in checked.problems] == [("90 is in none of its cited sources",)]


def test_identifiers_compare_without_punctuation_but_never_across_digits() -> None:
    quote = [("S2", "reviewed every 24 months")]
    ok = verify_draft(draft(("KV PS 0471 is reviewed on a 24-month cycle.", quote)), SOURCES, "When?")
    assert len(ok.kept.sentences) == 1
    wrong = verify_draft(draft(("KV-PS-0417 is reviewed every 24 months.", quote)), SOURCES, "When?")
    assert wrong.kept.not_found and "kv-ps-0417" in wrong.feedback()


def test_a_quote_in_another_source_moves_the_citation_and_an_unknown_one_is_dropped() -> None:
    checked = verify_draft(
        draft(("The 40 mm charge is $15,480.", [("S2", "40 mm | $15,480"), ("S2", "an invented passage of text")])),
        SOURCES, "What is the 40 mm charge?",
    )  # fmt: skip
    (sentence,) = checked.kept.sentences
    assert sentence.quotes == (Quote("S1", "40 mm | $15,480"),) and checked.relabelled == 1
    assert checked.to_trace()["quotes"] == 2 and checked.quotes_found == 0
