"""The draft: sentences resting on spans, quotes of the evidence, missing parts; and the streamed draft text."""

from __future__ import annotations

from enterprise_rag.answer.checks.draft import (
    MISSING_PART,
    QUOTED_INTRO,
    Draft,
    Sentence,
    draft_text,
    quoting,
    row_text,
)
from enterprise_rag.schema.spans import number_spans

SPANS = number_spans([("S1", "Refunds take 14 days."), ("S2", "Size | Fee\n40 mm | $2,260\n\nFees are waived.")])
REFUNDS, ROW, WAIVED = SPANS


def test_a_reply_keeps_one_sentence_per_listed_span_in_text_order_without_citation_marks() -> None:
    reply = {"L3": "Fees are waived.", "L1": "1. Refunds take 14 days [S1].", "L2": " - ", "L99": "Invented."}
    draft = Draft.from_reply(reply, SPANS)
    assert draft.sentences == (Sentence("Refunds take 14 days.", (REFUNDS,)), Sentence("Fees are waived.", (WAIVED,)))
    draft = Draft.from_reply({"L1": "Refunds take 14 days."}, [REFUNDS])
    assert draft.render() == "Refunds take 14 days. [S1]" and draft.cited[0].quotes[0].text == REFUNDS.text


def test_quotes_render_as_a_marked_list_and_a_row_with_its_column_names() -> None:
    assert row_text(ROW) == "Size: 40 mm; Fee: $2,260"
    draft = Draft((), quoting([ROW, WAIVED]), ("how long is it valid",))
    assert draft.render().splitlines() == [
        QUOTED_INTRO, '- "Size: 40 mm; Fee: $2,260" [S2]', '- "Fees are waived." [S2]',
        MISSING_PART.format(part="how long is it valid"),
    ]  # fmt: skip
    assert draft.quoted and draft.partial


def test_many_short_sentences_render_as_a_list_after_their_intro_line() -> None:
    items = tuple(Sentence(f"Step {i} is done.", (REFUNDS,)) for i in range(1, 5))
    draft = Draft((Sentence("The steps are:", (REFUNDS,)), *items))
    assert draft.render().splitlines()[:2] == ["The steps are:", "- Step 1 is done. [S1]"]


def test_the_streamed_draft_is_the_text_of_its_sentences_even_unfinished() -> None:
    assert draft_text('{"L1": "Refunds take 14 da') == "Refunds take 14 da"
    assert draft_text('{"L1": "A \\"b\\".", "L2": "", "L3": "C') == 'A "b". C'
    assert draft_text('{"L4": "ends in \\') == "ends in "
