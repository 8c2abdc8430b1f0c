"""The evidence units of a source: headings, sentences, list items and table rows, numbered across sources.

Answers are built from spans, not from whole passages: the model chooses the numbered spans that
answer a question, writes from those alone, and every answer sentence carries the spans it rests on.
A span is a verbatim piece of its source's text (so a citation can quote and highlight it); a table
row keeps its table's header row as ``context``, also when the table continues after a break (a page
or chunk boundary) with the same number of columns, since a row's cells mean nothing without their
column names. Fenced code stays one span.

Spans are numbered ``L1..Ln`` in source order across all the sources of one prompt, so every call that
shares the prompt's prefix can name a span by its number. :func:`lists` groups the items of one list,
also when a page or chunk boundary splits it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from enterprise_rag.text import LIST_ITEM, split_line

SpanKind = Literal["heading", "sentence", "item", "row", "code"]

_HEADING = re.compile(r"^\s*#{1,6}\s+\S")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$")
_FENCE = ("```", "~~~")


@dataclass(frozen=True)
class Unit:
    """A piece of one source's text: ``start``/``end`` are its offsets in that text."""

    kind: SpanKind
    start: int
    end: int
    context: str = ""  # a table row's header row
    block: int = 0  # units of one block (text between blank lines: a paragraph, a list, a table) share it


@dataclass(frozen=True)
class Span:
    """A numbered evidence unit of source ``label``: its verbatim ``text`` and, for a table row, the header."""

    number: int
    label: str
    kind: SpanKind
    text: str
    context: str = ""
    block: int = 0  # spans of one block of one source share it

    @property
    def tag(self) -> str:
        """How prompts name the span: ``L12``."""
        return f"L{self.number}"

    def with_context(self) -> str:
        """The span as a reader needs it on its own: a table row after its header row."""
        return f"{self.context}\n{self.text}" if self.context else self.text


def _cells(line: str) -> int:
    return len([c for c in line.strip().strip("|").split("|")])


def _is_row(line: str) -> bool:
    return "|" in line.strip().strip("|") or line.strip().startswith("|")


def units(text: str) -> list[Unit]:
    """The evidence units of ``text`` in order: headings, sentences of paragraph lines, list items, table rows
    (with their header as context; the header row itself is not a unit), fenced code blocks whole."""
    out: list[Unit] = []
    header, header_cells = "", 0  # the last table header seen, which a continued table inherits
    in_table = False
    code_start: int | None = None
    offset = block = 0
    for raw in text.splitlines(keepends=True):
        line, start = raw.rstrip("\n"), offset
        offset += len(raw)
        stripped = line.strip()
        if stripped.startswith(_FENCE):
            if code_start is None:
                code_start = start
            else:
                out.append(Unit("code", code_start, start + len(line), block=block))
                code_start = None
            continue
        if code_start is not None:
            continue
        if not stripped:
            in_table = False
            block += 1
            continue
        lead = start + len(line) - len(line.lstrip())
        end = start + len(line.rstrip())
        if _is_row(line):
            if _TABLE_RULE.match(line):
                continue
            if not in_table and not (header and _cells(line) == header_cells):
                header, header_cells, in_table = stripped, _cells(line), True
                continue
            in_table = True
            out.append(Unit("row", lead, end, header, block))
            continue
        in_table = False
        if _HEADING.match(line):
            block += 1
            out.append(Unit("heading", lead, end, block=block))
            block += 1
        elif LIST_ITEM.match(line):
            out.append(Unit("item", lead, end, block=block))
        else:
            pos = lead
            for sentence in split_line(line.strip()):
                at = text.index(sentence, pos)
                out.append(Unit("sentence", at, at + len(sentence), block=block))
                pos = at + len(sentence)
    if code_start is not None:
        out.append(Unit("code", code_start, len(text.rstrip()), block=block))
    return out


def number_spans(sources: Sequence[tuple[str, str]]) -> list[Span]:
    """The spans of ``sources`` ((label, text) pairs, in prompt order), numbered from 1 across all of them."""
    spans: list[Span] = []
    for label, text in sources:
        for unit in units(text):
            spans.append(Span(len(spans) + 1, label, unit.kind, text[unit.start : unit.end], unit.context, unit.block))
    return spans


def lists(spans: Sequence[Span]) -> list[list[Span]]:
    """The lists among ``spans``: runs of items of one source, with only sentences (an item's description)
    between them, in one block or in the next (a list split by a page break); a heading ends a list."""
    out: list[list[Span]] = []
    current: list[Span] = []
    last: Span | None = None
    for span in spans:
        if span.kind == "heading" or (last is not None and span.label != last.label):
            current, last = [], None
        if span.kind != "item":
            continue
        if current and last is not None and span.block - last.block <= 1:
            current.append(span)
        else:
            current = [span]
            out.append(current)
        last = span
    return [items for items in out if len(items) > 1]
