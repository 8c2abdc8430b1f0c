"""Citation markup in answer text: labels in every form, stripping them, and sentence units."""

from __future__ import annotations

import pytest

from enterprise_rag.answer.checks.citations import CITATION, cited_labels, normalise, split_sentences, strip_citations

# --- labels ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A fact [S1].", ["S1"]),
        ("A fact [S1, S2].", ["S1", "S2"]),
        ("A fact [S1][S2].", ["S1", "S2"]),
        ("A fact [S1; S3].", ["S1", "S3"]),
        ("A fact [S1-S3].", ["S1", "S2", "S3"]),
        ("A fact [S1\u2013S3].", ["S1", "S2", "S3"]),
        ("A fact [s2] and [S1] then [S2].", ["S2", "S1"]),
        ("A fact [S10].", ["S10"]),
        ("No citation here [1] or [Source 1].", []),
    ],
)
def test_cited_labels(text: str, expected: list[str]) -> None:
    assert cited_labels(text) == expected


def test_citation_regex_matches_each_form() -> None:
    for form in ("[S1]", "[S1, S2]", "[S1; S2]", "[S1-S3]", "[s4]", "[ S1 ]"):
        assert CITATION.fullmatch(form), form
    assert [m.group() for m in CITATION.finditer("x [S1][S3] y")] == ["[S1]", "[S3]"]


def test_absurd_range_is_not_expanded() -> None:
    assert cited_labels("[S1-S5000]") == ["S1", "S5000"]


def test_strip_citations_tidies_spaces() -> None:
    assert strip_citations("The fee is 2.5% [S1]. Refunds take 14 days [S2, S3] , always.") == (
        "The fee is 2.5%. Refunds take 14 days, always."
    )
    assert strip_citations("- Item [S1]\n- Other [S2][S3]") == "- Item\n- Other"


def test_normalise() -> None:
    assert normalise("  \u201cFee\u201d \u2014 It\u2019s\n\tWAIVED  ") == '"fee" - it\'s waived'
    assert normalise("\ufb01le") == "file"  # NFKC ligature


# --- sentence units -------------------------------------------------------


def test_abbreviations_and_decimals_do_not_split() -> None:
    assert split_sentences("The fee is 2.5% (e.g. for wires) [S1].") == ["The fee is 2.5% (e.g. for wires) [S1]."]
    text = "Dr. Smith approved v1.4. Error E-4012 i.e. an expired token applies [S3]. See No. 5 in Fig. 2 [S1]."
    assert split_sentences(text) == [
        "Dr. Smith approved v1.4.",
        "Error E-4012 i.e. an expired token applies [S3].",
        "See No. 5 in Fig. 2 [S1].",
    ]


def test_trailing_citation_stays_with_its_sentence() -> None:
    assert split_sentences("Fees apply. [S1] Refunds take 14 days. [S2]") == [
        "Fees apply. [S1]",
        "Refunds take 14 days. [S2]",
    ]


def test_lines_and_list_items_are_units() -> None:
    text = "# Fees\nThe policy covers:\n- wires [S1]\n1. refunds [S2]\n\nLast line without stop"
    expected = ["Fees", "The policy covers:", "wires [S1]", "refunds [S2]", "Last line without stop"]
    assert split_sentences(text) == expected


def test_no_split_inside_quotation() -> None:
    text = 'The policy says "Fees apply. Members are exempt." [S1] Next point here.'
    assert split_sentences(text) == ['The policy says "Fees apply. Members are exempt." [S1]', "Next point here."]


def test_labels_with_a_source_word_or_in_parentheses_are_citations() -> None:
    assert cited_labels("[Source: S3] The next step is to dig.") == ["S3"]
    assert cited_labels("It is due in May (S1, S2). See [Sources: S4; S5].") == ["S1", "S2", "S4", "S5"]
    assert strip_citations("It is due in May (S1).") == "It is due in May."
    assert cited_labels("Form (1) and (see S1) and [Source 1] are not labels.") == []
