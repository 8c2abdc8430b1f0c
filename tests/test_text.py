"""Text cuts shared by checks and span numbering: sentences of a line, and the normalised word sequence."""

from __future__ import annotations

import re

from enterprise_rag.text import LIST_ITEM, split_line, word_sequence


def test_a_line_splits_at_sentence_ends_but_not_at_abbreviations_decimals_or_quotations() -> None:
    line = 'Dr. Smith measured 2.5 mm (e.g. in No. 4). He said "Stop. Now." Then he left.'
    assert split_line(line) == ["Dr. Smith measured 2.5 mm (e.g. in No. 4).", 'He said "Stop. Now."', "Then he left."]


def test_text_kept_after_a_sentence_end_stays_with_that_sentence() -> None:
    labels = re.compile(r"(?:\s*\[S\d+\])+")
    assert split_line("Valves close. [S1] Pumps stop. [S2][S3]", labels) == [
        "Valves close. [S1]",
        "Pumps stop. [S2][S3]",
    ]
    assert split_line("Valves close. [S1] Pumps stop.") == ["Valves close.", "[S1] Pumps stop."]


def test_word_sequence_folds_case_dashes_and_apostrophes_and_keeps_codes_whole() -> None:
    assert word_sequence("The ROUTER\u2019s code is AB\u2013123, at 2.5 %!") == " the router's code is ab-123 at 2.5 "
    assert word_sequence("ﬁle") == word_sequence("file")  # NFKC folds ligatures
    assert " ab-12 " not in word_sequence("code AB-123")  # padded, so a match is whole words


def test_one_list_item_pattern_reads_markers_and_their_indent() -> None:
    items = ["- a", "* a", "+ a", "\u2022 a", "\u2013 a", "1. a", "12) a", "b) a", "B. a", "(3) a", "(c) a"]
    for line in items:
        m = LIST_ITEM.match(line)
        assert m and line[m.end() :] == "a", line
    nested = LIST_ITEM.match("    2. step")
    assert nested and nested.group(1) == "    " and LIST_ITEM.sub("", "    2. step") == "step"
    for line in ["2024. The year", "-", "1.5 litres", "e.g. this", "text - dash", "-> arrow", "[1] note"]:
        assert not LIST_ITEM.match(line), line
