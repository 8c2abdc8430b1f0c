"""The structured draft: not-found is the ``found`` field, never a phrase; rendering to ``[S1]`` text."""

from __future__ import annotations

import json

from enterprise_rag.answer.checks.draft import Draft, Quote, Sentence


def reply(found: bool, *sentences: tuple[str, list[tuple[str, str]]]) -> dict[str, object]:
    return {"found": found, "sentences": [{"text": text, "citations": [{"source": s, "quote": q} for s, q in cites]}
                                          for text, cites in sentences]}  # fmt: skip


def test_not_found_is_the_field_or_an_empty_answer_never_a_phrase() -> None:
    negative = Draft.from_reply(reply(True, ("You don't have to pre-approve trips of $500 or less.", [("S1", "x")])))
    assert not negative.not_found  # "don't have" is a fact here, not a refusal
    assert Draft.from_reply(reply(False, ("Refunds take 14 days.", [("S1", "14 days")]))).not_found
    assert Draft.from_reply(reply(True)).not_found
    assert Draft.from_reply(reply(True, ("[S1] -", [("S1", "x")]))).not_found  # nothing but markup


def test_sentences_lose_their_own_labels_and_list_markers_and_render_cited() -> None:
    draft = Draft.from_reply(reply(True, ("1. Refunds take 14 days [S3].", [("s1", "take 14 days"), ("S2", "14")])))
    (sentence,) = draft.sentences
    assert sentence == Sentence("Refunds take 14 days.", (Quote("S1", "take 14 days"), Quote("S2", "14")))
    assert draft.render() == "Refunds take 14 days. [S1][S2]"


def test_many_short_sentences_render_as_a_list_and_round_trip_as_json() -> None:
    items = [(f"Step {i} is done.", [("S1", f"step {i} is done")]) for i in range(1, 5)]
    draft = Draft.from_reply(reply(True, *items))
    assert draft.render().splitlines()[0] == "- Step 1 is done. [S1]" and len(draft.render().splitlines()) == 4
    assert Draft.from_reply(json.loads(draft.to_json())) == draft
