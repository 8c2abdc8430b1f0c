"""What the screen reads: a chosen span's paragraph, the unit a reader meets it in."""

from __future__ import annotations

from enterprise_rag.answer.checks.addressee import paragraph_of
from enterprise_rag.schema.spans import number_spans

TEXT = (
    "Badges are issued at the front desk. Bring a photo ID.\n\n"
    "You need:\n\n- a signed contract\n- a safety briefing\n- a parking permit\n\n"
    "| Zone | Access |\n| --- | --- |\n| Lab | Escorted |\n| Office | Badge |\n"
)


def test_a_sentence_reads_its_block_an_item_its_whole_list_and_a_row_itself() -> None:
    spans = number_spans([("S1", TEXT)])
    by_text = {sp.text: sp for sp in spans}
    sentence = next(sp for sp in spans if sp.kind == "sentence" and "photo ID" in sp.text)
    assert paragraph_of(sentence, spans) == "Badges are issued at the front desk. Bring a photo ID."
    item = next(sp for t, sp in by_text.items() if "safety briefing" in t)
    assert item.kind == "item"
    whole = paragraph_of(item, spans)
    assert all(x in whole for x in ("signed contract", "safety briefing", "parking permit"))
    row = next(sp for sp in spans if sp.kind == "row" and "Escorted" in sp.text)
    assert "Escorted" in paragraph_of(row, spans) and "Badge |" not in paragraph_of(row, spans)
