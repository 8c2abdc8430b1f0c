"""Verification in code of each answer sentence against the spans it rests on: values, units, months, codes,
addresses."""

from __future__ import annotations

from enterprise_rag.answer.checks.draft import Sentence
from enterprise_rag.answer.checks.verification import check_values, copies_its_spans, numbers_left_out, states_nothing
from enterprise_rag.schema.spans import Span, number_spans

TABLE = "Meter size | Capacity charge | Lead time\n40 mm | $15,480 | 6 weeks\n50 mm | $24,190 | 8 weeks"
PROSE = "Station KV-PS-0471 has a duty capacity of 22 L/s. Applications close on 30 June."
SPANS = number_spans([("S1", TABLE), ("S2", PROSE)])
ROW_40, ROW_50, STATION, CLOSE = SPANS


def reasons(text: str, *spans: Span, question: str = "What applies?", hosts: tuple[str, ...] = ()) -> tuple[str, ...]:
    return check_values(Sentence(text, spans), question, hosts).reasons


def test_a_sentence_restating_its_spans_passes() -> None:
    assert reasons("The capacity charge for a 40 mm meter is $15,480, with a lead time of 6 weeks.", ROW_40) == ()
    assert reasons("KV-PS-0471 has a duty capacity of 22 litres per second... 22 L/s.", STATION) == ()
    assert reasons("Applications close on 30 June.", CLOSE) == ()


def test_a_value_from_another_table_row_is_rejected() -> None:
    """The row's own cells are its evidence: a neighbouring row's value fails (it passed the lexical gate)."""
    assert reasons("The capacity charge for a 40 mm meter is $24,190.", ROW_40) == ("24190 is not in its lines",)
    assert reasons("The capacity charge for a 40 mm meter is $24,190.", ROW_50) == ("40 is not in its lines",)


def test_a_number_unit_month_or_code_its_spans_do_not_give_is_rejected() -> None:
    assert reasons("KV-PS-0471 has a duty capacity of 22 kVA.", STATION) == ("its lines do not give 22 kva",)
    assert reasons("Applications close on 30 September.", CLOSE) == ("september is not in its lines",)
    assert reasons("KV-PS-0417 has a duty capacity of 22 L/s.", STATION) == ("its lines do not name kv-ps-0417",)
    assert reasons("KV-PS-0471 has a duty capacity of 25 L/s.", STATION) == ("25 is not in its lines",)
    # the question's own figures may be repeated, its codes never
    asked = "It costs $3,000?"
    assert reasons("A 40 mm meter for $3,000 pays a capacity charge of $15,480.", ROW_40, question=asked) == ()
    assert reasons("KV-PS-0417 is 22 L/s.", STATION, question="What is KV-PS-0417?") != ()


def test_a_web_or_mail_address_must_be_in_its_spans_unless_it_links_to_an_allowed_host() -> None:
    (desk,) = number_spans([("S1", "Report lost tokens at desk@kv.example or https://kv.example/desk/2.")])
    assert reasons("Report lost tokens at desk@kv.example or https://kv.example/desk/2.", desk) == ()
    assert reasons("Report lost tokens at https://kv.example/reset.", desk) != ()
    assert reasons("See https://help.kv.example/tokens.", desk, hosts=("kv.example",)) == ()
    assert reasons("See https://kv.example.evil/tokens.", desk, hosts=("kv.example",)) != ()
    assert reasons("Mail reset@kv.example.", desk, hosts=("kv.example",)) != ()


def test_a_connecting_line_states_nothing() -> None:
    assert states_nothing("The charges are:") and states_nothing("It is.")
    assert not states_nothing("The fee is 5 euros.") and not states_nothing("Fees apply to every wire transfer.")
    assert not states_nothing("No fine is charged.")  # a short negative fact is a statement to judge


def test_only_a_sentence_that_is_its_span_word_for_word_needs_no_judge() -> None:
    (span,) = number_spans([("S1", "Members must not share their badge.")])
    assert copies_its_spans(Sentence("Members must not share their badge.", (span,)))
    assert copies_its_spans(Sentence("members must not share their badge", (span,)))
    assert not copies_its_spans(Sentence("Members must not share their badge. Call 555-0100 now.", (span,)))
    assert not copies_its_spans(Sentence("Members must share their badge.", (span,)))
    assert not copies_its_spans(Sentence("Members must not share their badge.", ()))


def test_a_sentence_that_loses_a_figure_of_its_span_is_known() -> None:
    (lead, item) = number_spans([("S1", "Each holder submits two items within 30 days:\n\n1. A proof of address")])
    assert numbers_left_out(Sentence("Each holder submits two items.", (lead,))) == ["30"]
    assert numbers_left_out(Sentence("Two items, within 30 days.", (lead,))) == []
    assert numbers_left_out(Sentence("A proof of address.", (item,))) == []  # a list item's ordinal is no figure
    assert numbers_left_out(Sentence("A 40 mm meter costs $15,480.", (ROW_40,))) == ["6"]
