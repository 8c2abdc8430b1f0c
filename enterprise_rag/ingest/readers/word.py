"""Word (.docx) reader: paragraph styles to breadcrumbs, lists and tables kept whole.

A paragraph is a heading when its style is a heading style ("Heading 2") or it carries an outline level,
the way Word's navigation pane decides; the "Title" style names the document when its properties do not.
Consecutive list paragraphs (numbering or a list style) form one list block, each table one table block
(merged cells read once). Text is read as the document shows it with tracked changes accepted: deleted
text is not indexed, inserted text is; comments, headers and footers are not part of the body.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from enterprise_rag.ingest.readers.common import Parsed, table_text
from enterprise_rag.ingest.readers.office import element_text, one_line, open_package
from enterprise_rag.ingest.readers.outline import Outline, by_level

_HEADING_STYLE = re.compile(r"^heading\s*(\d)$", re.IGNORECASE)


def read_word(raw: bytes, path: Path) -> Parsed:
    """Parse a .docx file."""
    import docx
    from docx.table import Table

    document = open_package(raw, path, "Word document", docx.Document)
    items = list(document.iter_inner_content())
    title = (document.core_properties.title or "").strip() or _styled_title(items) or ""
    outline = Outline(title or path.stem, by_level)
    pending: list[str] = []  # the list being collected

    def flush() -> None:
        if pending:
            outline.add("\n".join(pending), kind="list")
            pending.clear()

    for item in items:
        if isinstance(item, Table):
            flush()
            outline.add(_table(item), kind="table")
            continue
        text = element_text(item._p).strip()
        if not text:
            continue
        style = (item.style.name if item.style is not None else "") or ""
        level = _heading_level(item, style)
        if style.casefold() == "title" or level is not None:
            flush()
            if outline.is_title(text, loose=level in (None, 1)):
                continue  # the document's title is not repeated in every breadcrumb
            if level is None:
                outline.add(text)  # a second Title-styled line (a subtitle) is text
            else:
                outline.heading(text, level)
            continue
        if _is_list_item(item, style):
            marker = f"{len(pending) + 1}." if "number" in style.casefold() else "-"
            pending.append(f"{marker} {one_line(text)}")
            continue
        flush()
        outline.add(text)
    flush()
    return Parsed(title=title, blocks=outline.finish())


def _styled_title(items: list[Any]) -> str | None:
    for item in items:
        style = getattr(item, "_p", None) is not None and item.style
        if style and (style.name or "").casefold() == "title":
            return one_line(element_text(item._p)) or None
    return None


def _heading_level(paragraph: Any, style: str) -> int | None:
    match = _HEADING_STYLE.match(style.strip())
    if match:
        return int(match.group(1))
    outline_level = paragraph._p.xpath("./w:pPr/w:outlineLvl/@w:val")
    if outline_level and str(outline_level[0]).isdigit() and int(outline_level[0]) < 9:
        return int(outline_level[0]) + 1
    return None


def _is_list_item(paragraph: Any, style: str) -> bool:
    return bool(paragraph._p.xpath("./w:pPr/w:numPr")) or style.casefold().startswith("list")


def _table(table: Any) -> str:
    """Rows of cells; a cell merged across columns is read once, one merged down repeats in each row it
    spans (so every row keeps its value)."""
    rows: list[list[str]] = []
    for row in table.rows:
        cells, previous = [], None
        for cell in row.cells:
            if cell._tc is not previous:
                cells.append(one_line(element_text(cell._tc)))
            previous = cell._tc
        rows.append(cells)
    return table_text(rows)
