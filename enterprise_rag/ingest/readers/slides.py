"""PowerPoint (.pptx) reader: one page per slide, the slide title as heading, speaker notes their own section.

Every block of a slide carries the slide number as its page, so a citation names the slide. Shapes are read
top to bottom, then left to right (grouped shapes in place); a text frame with several paragraphs is a list
(slides are written as bullets), a table is a table block.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from enterprise_rag.ingest.readers.common import Parsed, table_text
from enterprise_rag.ingest.readers.office import element_text, one_line, open_package
from enterprise_rag.ingest.readers.outline import Outline, by_level

NOTES_HEADING = "Speaker notes"


def read_slides(raw: bytes, path: Path) -> Parsed:
    """Parse a .pptx file."""
    import pptx

    presentation = open_package(raw, path, "PowerPoint presentation", pptx.Presentation)
    slides = list(presentation.slides)
    titles = [_title(slide) for slide in slides]
    title = (presentation.core_properties.title or "").strip() or next((t for t in titles if t), "")
    outline = Outline(title or path.stem, by_level)
    for number, (slide, heading) in enumerate(zip(slides, titles, strict=True), start=1):
        outline.heading(heading or f"Slide {number}", 1, page=number)
        for shape in _reading_order(slide.shapes):
            if shape == slide.shapes.title:
                continue
            if getattr(shape, "has_table", False) and shape.has_table:
                rows = [[one_line(element_text(cell._tc)) for cell in row.cells] for row in shape.table.rows]
                outline.add(table_text(rows), kind="table", page=number)
            elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
                _add_text_frame(outline, shape.text_frame, number)
        notes = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
        if notes is not None and element_text(notes._txBody).strip():
            outline.heading(NOTES_HEADING, 2, page=number)
            _add_text_frame(outline, notes, number)
    return Parsed(title=title, blocks=outline.finish(), page_count=len(slides))


def _title(slide: Any) -> str:
    shape = slide.shapes.title
    return one_line(element_text(shape._element)) if shape is not None and shape.has_text_frame else ""


def _reading_order(shapes: Any) -> Iterator[Any]:
    """Shapes top to bottom, then left to right; a group's shapes in its place."""
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    for shape in sorted(shapes, key=lambda s: (s.top or 0, s.left or 0)):
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _reading_order(shape.shapes)
        else:
            yield shape


def _add_text_frame(outline: Outline, frame: Any, page: int) -> None:
    paragraphs = [(p.level, one_line(element_text(p._p))) for p in frame.paragraphs]
    paragraphs = [(level, text) for level, text in paragraphs if text]
    if len(paragraphs) == 1:
        outline.add(paragraphs[0][1], page=page)
    elif paragraphs:
        outline.add("\n".join(f"{'  ' * level}- {text}" for level, text in paragraphs), kind="list", page=page)
