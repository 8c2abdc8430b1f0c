"""Spreadsheet reader (.xlsx, .csv): each sheet a section, its rows in groups that repeat the header row.

A row alone means little ("4471 | 12.50 | 3"); with its column names it answers "the price of SKU 4471".
So the first row with text is the sheet's header, and the rows under it are cut into groups of about one
leaf chunk (:data:`ROW_GROUP_CHARS`), each a table block that starts with the header and sits under a
heading naming its rows ("rows 12-19"): the breadcrumb of every chunk, and so its citation, says sheet and
rows. Cells are read as values (the result of a formula as last saved, dates as ISO dates).
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import io
from pathlib import Path
from typing import Any

from enterprise_rag.errors import IngestError
from enterprise_rag.ingest.readers.common import Parsed, decode_text, table_text
from enterprise_rag.ingest.readers.office import one_line, open_package
from enterprise_rag.ingest.readers.outline import Outline, by_level

ROW_GROUP_CHARS = 480
"""About one leaf chunk of the default hierarchy (128 tokens at ~4 characters each), header included."""

Row = tuple[int, list[str]]  # (1-based row number in the sheet, cell texts)


def read_workbook(raw: bytes, path: Path) -> Parsed:
    """Parse an .xlsx file: every visible sheet with text, in workbook order."""
    import openpyxl

    opener = functools.partial(openpyxl.load_workbook, read_only=True, data_only=True)
    workbook = open_package(raw, path, "Excel workbook", opener)
    title = (workbook.properties.title or "").strip()
    outline = Outline(title or path.stem, by_level)
    try:
        for sheet in workbook.worksheets:
            if sheet.sheet_state != "visible":
                continue
            values = enumerate(sheet.iter_rows(values_only=True), start=1)
            add_sheet(outline, sheet.title, [(n, [_cell_text(v) for v in row]) for n, row in values])
    finally:
        workbook.close()
    return Parsed(title=title, blocks=outline.finish())


def read_csv(raw: bytes, path: Path) -> Parsed:
    """Parse a .csv file (delimiter sniffed: comma, semicolon, tab or pipe) as one sheet."""
    text = decode_text(raw, path)
    try:
        dialect: Any = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    try:
        rows = [(n, [one_line(c) for c in cells]) for n, cells in enumerate(csv.reader(io.StringIO(text), dialect), 1)]
    except csv.Error as exc:
        raise IngestError(str(path), f"malformed CSV: {exc}") from exc
    outline = Outline(path.stem, by_level)
    add_sheet(outline, None, rows)
    return Parsed(title="", blocks=outline.finish())


def add_sheet(outline: Outline, name: str | None, rows: list[Row]) -> None:
    """The sheet's row groups under the heading ``name`` (none for a file that is one sheet)."""
    rows = _trimmed(rows)
    if not rows:
        return
    if name is not None:
        outline.heading(name, 1)
    header, body = rows[0], rows[1:]
    if not body:
        outline.add(table_text([header[1]]), kind="table")
        return
    for group in _groups(header[1], body):
        first, last = group[0][0], group[-1][0]
        outline.heading(f"row {first}" if first == last else f"rows {first}-{last}", 2)
        outline.add(table_text([header[1], *(cells for _, cells in group)]), kind="table")


def _trimmed(rows: list[Row]) -> list[Row]:
    """Rows with text, cut to the columns that hold text anywhere (sheets carry empty formatted cells)."""
    kept = [(n, cells) for n, cells in rows if any(cells)]
    width = max((max(i for i, c in enumerate(cells) if c) + 1 for _, cells in kept), default=0)
    return [(n, (cells + [""] * width)[:width]) for n, cells in kept]


def _groups(header: list[str], body: list[Row]) -> list[list[Row]]:
    budget = ROW_GROUP_CHARS - len(" | ".join(header))
    groups: list[list[Row]] = [[]]
    used = 0
    for row in body:
        size = len(" | ".join(row[1])) + 1
        if groups[-1] and used + size > budget:
            groups.append([])
            used = 0
        groups[-1].append(row)
        used += size
    return groups


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return one_line(str(value))
