"""PDF reader (pypdf): text lines with their font size, weight and position, per page.

pypdf's plain ``extract_text`` loses what tells a heading from body text and a
table from prose, so text is collected through its visitor callback with the
position and font of every fragment. :mod:`.pdf_layout` turns those lines into
blocks; this module opens the file, refuses what cannot be read (corrupt,
encrypted, no pages) and builds the lines. pypdf itself is imported on the
first PDF read, not with this module: it is the slowest part of importing the
ingest path, and most processes that import the package never parse a PDF.
"""

from __future__ import annotations

import io
import logging
import re
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from enterprise_rag.errors import IngestError
from enterprise_rag.ingest.readers.common import Parsed
from enterprise_rag.ingest.readers.ocr import lines_of, ocr_text
from enterprise_rag.ingest.readers.pdf_layout import Line, build_blocks

if TYPE_CHECKING:
    from pypdf import PdfReader

logger = logging.getLogger(__name__)

_CHAR_EM = 0.62  # generous average glyph width in ems: a gap wider than this is a column gap
_BOLD = re.compile(r"bold|black|heavy|semibold|demi", re.IGNORECASE)
_MONO = re.compile(r"courier|mono|consol|menlo|code|typewriter", re.IGNORECASE)
_PAGE_NUMBER = re.compile(r"^(?:page\s*)?\d{1,4}(?:\s*(?:of|/)\s*\d{1,4})?$", re.IGNORECASE)
_JUNK_TITLE = re.compile(r"^(?:untitled|microsoft word - .*|.*\.(?:docx?|pdf|indd|tex))$", re.IGNORECASE)
_GENERIC_PARSE_ERRORS = (
    ValueError, KeyError, TypeError, AttributeError, IndexError, OSError, RecursionError, zlib.error, AssertionError,
)  # fmt: skip


def _parse_errors() -> tuple[type[BaseException], ...]:
    """What a malformed PDF raises: pypdf's own errors and the generic ones its parser lets through."""
    from pypdf.errors import PdfReadError, PdfStreamError

    return (PdfReadError, PdfStreamError, *_GENERIC_PARSE_ERRORS)


@dataclass
class _Frag:
    text: str
    x: float
    y: float
    size: float
    bold: bool
    mono: bool
    newline: bool


def read_pdf(raw: bytes, path: Path) -> Parsed:
    """Parse a PDF, keeping 1-based page numbers on every block."""
    where = str(path)
    if b"%PDF-" not in raw[:1024]:
        raise IngestError(where, "not a PDF file: no %PDF- header (corrupt or mislabelled file)")
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(raw), strict=False)
        if reader.is_encrypted and not _decrypt_without_password(reader):
            raise IngestError(where, "PDF is encrypted (password-protected); remove the password and ingest again")
        page_count = len(reader.pages)
    except IngestError:
        raise
    except _parse_errors() as exc:
        raise IngestError(where, f"corrupt or unreadable PDF ({type(exc).__name__}: {exc})") from exc
    if page_count == 0:
        raise IngestError(where, "PDF has no pages")
    pages: list[list[Line]] = []
    scanned: dict[int, str] = {}  # page index -> OCR text
    warnings: list[str] = []
    for number, page in enumerate(reader.pages, start=1):
        try:
            lines = _page_lines(page, number)
        except _parse_errors() as exc:
            logger.warning("%s: page %d could not be read and is skipped: %s", where, number, exc)
            warnings.append(f"page {number} could not be read ({type(exc).__name__}) and is left out")
            lines = []
        else:
            if not lines:
                text, warning = ocr_text(page, number)
                warnings += [warning] if warning else []
                scanned.update({number - 1: text} if text else {})
        pages.append(lines)
    sizes = Counter(ln.size for page in pages for ln in page if ln.cells is None)
    for index, text in scanned.items():
        pages[index] = lines_of(text, index + 1, sizes.most_common(1)[0][0] if sizes else 10.0)
    if not any(pages):
        raise IngestError(where, f"no extractable text in the PDF: {'; '.join(warnings) or 'every page is empty'}")
    _drop_running_headers(pages)
    title, blocks = build_blocks(pages, _metadata_title(reader))
    return Parsed(title=title or path.stem, blocks=blocks, page_count=page_count, warnings=warnings)


def _decrypt_without_password(reader: PdfReader) -> bool:
    """Open 'owner-password only' PDFs (empty user password); anything else stays refused."""
    from pypdf.errors import DependencyError

    try:
        return bool(reader.decrypt(""))
    except (DependencyError, NotImplementedError):
        return False
    except _parse_errors():
        return False


def _style(font: Any) -> tuple[bool, bool]:
    """(bold, monospaced) from the font's name, weight and flags."""
    if not font:
        return False, False
    name = str(font.get("/BaseFont", ""))
    try:
        descriptor = font.get("/FontDescriptor")
        descriptor = descriptor.get_object() if descriptor is not None else None
        weight = float(descriptor.get("/FontWeight", 0)) if descriptor else 0.0
        flags = int(descriptor.get("/Flags", 0)) if descriptor else 0
    except (AttributeError, TypeError, ValueError):
        weight, flags = 0.0, 0
    bold = bool(_BOLD.search(name)) or weight >= 600 or bool(flags & (1 << 18))
    mono = bool(_MONO.search(name)) or bool(flags & 1)
    return bold, mono


def _fragments(page: Any) -> list[_Frag]:
    frags: list[_Frag] = []
    pending_newline = True

    def visit(text: str, cm: list[float], tm: list[float], font: Any, font_size: float) -> None:
        nonlocal pending_newline
        if not text:
            return
        # position and size in page space: text matrix times current transformation matrix
        a, b, c, d = (tm[0] * cm[0] + tm[1] * cm[2], tm[0] * cm[1] + tm[1] * cm[3],
                      tm[2] * cm[0] + tm[3] * cm[2], tm[2] * cm[1] + tm[3] * cm[3])  # fmt: skip
        x = tm[4] * cm[0] + tm[5] * cm[2] + cm[4]
        y = tm[4] * cm[1] + tm[5] * cm[3] + cm[5]
        size = round(float(font_size) * (abs(a * d - b * c) ** 0.5 or 1.0), 1)
        bold, mono = _style(font)
        for i, part in enumerate(text.split("\n")):
            if i:
                pending_newline = True
            if part.strip():
                frags.append(_Frag(part, x, y, size, bold, mono, pending_newline))
                pending_newline = False

    page.extract_text(visitor_text=visit)
    return frags


def _page_lines(page: Any, number: int) -> list[Line]:
    """Fragments grouped into lines; a line whose fragments sit in separate columns is a table row."""
    raw_lines: list[list[_Frag]] = []
    for frag in _fragments(page):
        if frag.newline or not raw_lines:
            raw_lines.append([frag])
        else:
            raw_lines[-1].append(frag)
    rows = [_cells(frags, ()) for frags in raw_lines]
    i = 0
    while i < len(rows):  # re-split each run of table rows on the column positions the run shares
        j = i
        while j < len(rows) and len(rows[j]) > 1:
            j += 1
        if j > i:
            columns = sorted({cell[0].x for row in rows[i:j] for cell in row})
            rows[i:j] = [_cells([f for cell in row for f in cell], columns) for row in rows[i:j]]
        i = max(j, i + 1)
    lines = [_line(row, number) for row in rows]
    return _absorb_wrapped_header_cells([ln for ln in lines if ln.text])


def _cells(frags: list[_Frag], columns: Sequence[float]) -> list[list[_Frag]]:
    """Split a line's fragments into cells: a fragment in a known column or after a wide gap starts one."""
    cells: list[list[_Frag]] = [[frags[0]]]
    for prev, frag in zip(frags, frags[1:], strict=False):
        cell_x = cells[-1][0].x
        same_baseline = abs(frag.y - prev.y) < 0.3 * max(prev.size, 1.0)
        est_end = prev.x + len(prev.text) * _CHAR_EM * prev.size
        if abs(frag.x - cell_x) < 1.0:
            cells[-1].append(frag)  # the cell's next wrapped line
        elif any(abs(frag.x - c) < 1.0 for c in columns):
            cells.append([frag])
        elif same_baseline and frag.x <= est_end + prev.size:
            cells[-1].append(frag)  # same line, e.g. a bold word inside a sentence
        else:
            cells.append([frag])
    return cells


def _line(cells: list[list[_Frag]], page: int) -> Line:
    frags = [f for cell in cells for f in cell]
    texts = [_join_cell(c) for c in cells]
    weights = Counter[float]()
    for f in frags:
        weights[f.size] += len(f.text.strip())
    bold_chars = sum(len(f.text.strip()) for f in frags if f.bold)
    mono_chars = sum(len(f.text.strip()) for f in frags if f.mono)
    total = sum(len(f.text.strip()) for f in frags) or 1
    table = len(cells) > 1
    return Line(
        text=" | ".join(t for t in texts if t) if table else texts[0],
        x=min(f.x for f in frags),
        y=max(f.y for f in frags),
        size=weights.most_common(1)[0][0],
        bold=bold_chars / total > 0.8,
        mono=mono_chars / total > 0.8,
        page=page,
        cells=texts if table else None,
        cell_xs=[c[0].x for c in cells] if table else None,
    )


def _join_cell(frags: list[_Frag]) -> str:
    out = ""
    for i, f in enumerate(frags):
        wrapped = i > 0 and abs(f.x - frags[0].x) < 1.0  # next line inside the same cell
        out += (" " + f.text.strip()) if wrapped else f.text
    return " ".join(out.split())


def _absorb_wrapped_header_cells(lines: list[Line]) -> list[Line]:
    """A lone line just above a table row, in one of its columns, is that cell's first line ("Total" / "score")."""
    out: list[Line] = []
    for line in lines:
        prev = out[-1] if out else None
        if (
            line.cells is not None and line.cell_xs is not None and prev is not None and prev.cells is None
            and abs(prev.size - line.size) < 0.6 and 0 < prev.y - line.y <= 1.7 * line.size
        ):  # fmt: skip
            column = next((i for i, x in enumerate(line.cell_xs) if abs(x - prev.x) < 1.0), None)
            if column is not None:
                line.cells[column] = f"{prev.text} {line.cells[column]}".strip()
                line.text = " | ".join(line.cells)
                line.y = prev.y
                out[-1] = line
                continue
        out.append(line)
    return out


def _furniture_key(text: str) -> str:
    return re.sub(r"\d+", "#", " ".join(text.split())).casefold()


def _drop_running_headers(pages: list[list[Line]]) -> None:
    """Remove page numbers and lines repeated at the top or bottom of most pages."""
    for lines in pages:
        for idx in (len(lines) - 1, 0):
            if lines and 0 <= idx < len(lines) and _PAGE_NUMBER.match(lines[idx].text.strip()):
                lines.pop(idx)
    if len(pages) < 3:
        return
    for end in (0, -1):
        counts = Counter(_furniture_key(p[end].text) for p in pages if p)
        repeated = {k for k, n in counts.items() if n >= max(3, len(pages) // 2 + 1)}
        for lines in pages:
            if lines and _furniture_key(lines[end].text) in repeated:
                lines.pop(end)


def _metadata_title(reader: PdfReader) -> str | None:
    """The document information /Title, unless it is a file name or a placeholder."""
    try:
        meta = reader.metadata
        title = " ".join(str(meta.title).split()) if meta is not None and meta.title else ""
    except _parse_errors():
        return None
    return title if title and not _JUNK_TITLE.match(title) else None
