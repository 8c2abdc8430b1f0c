from enterprise_rag.answer.checks.numbers import invented_numbers, numbers


def test_numbers_are_normalised_across_currency_separators_and_compounds() -> None:
    assert numbers("over $25, a 30-day window, 1,000 units, 1.50 EUR, E-4120, 007, CET12") == {
        "25", "30", "1000", "1.5", "4120", "7"
    }  # fmt: skip


def test_a_number_in_no_source_is_reported_but_citation_labels_and_ordinals_are_not() -> None:
    answer = "1. Claims over $25 need a receipt. [S2]\n2. The CET1 ratio is 8%. [S1][S3]"
    assert invented_numbers(answer, ["A receipt is required for any expense over $25.", "Question text"]) == ["8"]


def test_numbers_from_the_question_count_as_known() -> None:
    answer = "A score of 21 is in the 18-24 band. [S1]"
    assert invented_numbers(answer, ["Band 18-24: Practitioner", "I scored 21"]) == []
