"""Evidence units of a source: headings, sentences, list items, table rows with their header, lists kept whole."""

from __future__ import annotations

from enterprise_rag.schema.spans import lists, number_spans, units

TEXT = (
    "## Charges\n"
    "Two charges apply. The capacity charge rises with size (e.g. 40 mm).\n\n"
    "Meter size | Capacity charge\n"
    "20 mm | $3,870\n"
    "32 mm | $9,910\n\n"
    "40 mm | $15,480\n\n"
    "1. Secure the Site\n"
    "Park the vehicle.\n"
    "2. Call Control\n\n"
    "3. Valve Off\n"
    "```\ncode line\n```\n"
)


def test_units_are_verbatim_pieces_of_the_text_in_order() -> None:
    found = units(TEXT)
    assert [(u.kind, TEXT[u.start : u.end]) for u in found] == [
        ("heading", "## Charges"),
        ("sentence", "Two charges apply."),
        ("sentence", "The capacity charge rises with size (e.g. 40 mm)."),
        ("row", "20 mm | $3,870"),
        ("row", "32 mm | $9,910"),
        ("row", "40 mm | $15,480"),
        ("item", "1. Secure the Site"),
        ("sentence", "Park the vehicle."),
        ("item", "2. Call Control"),
        ("item", "3. Valve Off"),
        ("code", "```\ncode line\n```"),
    ]


def test_a_row_keeps_its_header_also_when_the_table_continues_after_a_break() -> None:
    rows = [u for u in units(TEXT) if u.kind == "row"]
    assert {u.context for u in rows} == {"Meter size | Capacity charge"}
    assert units("| a | b |\n|---|---|\n| 1 | 2 |")[0].context == "| a | b |"  # a Markdown rule line is no row


def test_spans_are_numbered_across_sources_and_lists_run_over_a_page_break() -> None:
    spans = number_spans([("S1", "One sentence here."), ("S2", TEXT)])
    assert [s.number for s in spans] == list(range(1, len(spans) + 1))
    assert spans[0].label == "S1" and spans[1].label == "S2" and spans[1].tag == "L2"
    (steps,) = lists(spans)
    assert [s.text for s in steps] == ["1. Secure the Site", "2. Call Control", "3. Valve Off"]
    assert spans[4].with_context() == "Meter size | Capacity charge\n20 mm | $3,870"
