"""Turn positioned PDF lines into blocks: headings, paragraphs, lists, tables.

Heuristics, in order of trust:

* a heading is set in a larger font than the body text (its rank is its size),
  or is a short, bold, body-size line standing alone; numbering ("3", "3.1")
  nests headings of the same size;
* a bold *numbered* body-size line ("4. Lesson Capture") is a list item, not a
  heading: documents number list entries as often as sections;
* lines of one paragraph are re-joined; a paragraph ends at a vertical gap
  wider than the usual line spacing, a change of font, or a dedent;
* a list item runs on while its lines stay indented under it.

Blocks never span pages (each keeps its page number), but headings carry over
page breaks, so a section continuing on the next page keeps its breadcrumb.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from enterprise_rag.ingest.readers.outline import Outline
from enterprise_rag.schema.documents import Block
from enterprise_rag.text import LIST_ITEM

_NUMBERING = re.compile(r"^(\d+(?:\.\d+)*)\.?\s+\S")
_MAX_HEADING = 200
_ENDS_SENTENCE = (".", "!", "?", ":", '."', ".)")

HeadingKey = tuple[int, tuple[int, ...] | None]


@dataclass
class Line:
    """One visual line (or table row) of a page; ``y`` is the baseline, growing upwards."""

    text: str
    x: float
    y: float
    size: float
    bold: bool
    page: int
    mono: bool = False
    cells: list[str] | None = None
    cell_xs: list[float] | None = None


def encloses(outer: HeadingKey, inner: HeadingKey) -> bool:
    """Larger font encloses smaller; at equal size '3' encloses '3.1' and any unnumbered heading."""
    (rank_o, num_o), (rank_i, num_i) = outer, inner
    if rank_o != rank_i:
        return rank_o < rank_i
    if num_o is None:
        return False
    return num_i is None or (len(num_o) < len(num_i) and num_i[: len(num_o)] == num_o)


def _numbering(text: str) -> tuple[int, ...] | None:
    m = _NUMBERING.match(text)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


class _Stats:
    """Document-wide typography: body font size, usual line spacing, heading sizes."""

    def __init__(self, pages: list[list[Line]]) -> None:
        sizes: Counter[float] = Counter()
        for ln in (ln for p in pages for ln in p if ln.cells is None):
            sizes[ln.size] += len(ln.text)
        self.body = sizes.most_common(1)[0][0] if sizes else 10.0
        gaps: Counter[float] = Counter()
        lengths: list[int] = []
        for page in pages:
            body = [ln for ln in page if ln.cells is None and abs(ln.size - self.body) < 0.6]
            lengths.extend(len(ln.text) for ln in body)
            for a, b in zip(body, body[1:], strict=False):
                if 0 < a.y - b.y < 3 * self.body:
                    gaps[round(a.y - b.y)] += 1
        self.line_gap = float(gaps.most_common(1)[0][0]) if gaps else 1.2 * self.body
        lengths.sort()
        self.full_line = lengths[int(len(lengths) * 0.9)] if lengths else 80
        self.heading_sizes = sorted({ln.size for p in pages for ln in p if self.is_large(ln)}, reverse=True)
        self.styled = bool(self.heading_sizes) or any(ln.bold for p in pages for ln in p)

    def is_large(self, ln: Line) -> bool:
        return ln.cells is None and ln.size >= self.body + 1.0 and len(ln.text) <= 150

    def paragraph_break(self, prev: Line, ln: Line) -> bool:
        """A gap wider than line spacing, a move up the page (new column), or a short finished line."""
        gap = prev.y - ln.y
        if gap <= 0 or gap > 1.25 * self.line_gap:
            return True
        return prev.text.endswith(_ENDS_SENTENCE) and len(prev.text) < 0.7 * self.full_line


def build_blocks(pages: list[list[Line]], metadata_title: str | None) -> tuple[str, list[Block]]:
    """(title, blocks) for all pages, headings carried across page breaks.

    The title is the metadata title, else the largest text on the first page,
    else a first line that looks like a title; "" when there is none.
    """
    stats = _Stats(pages)
    title_line = _first_page_title(pages, stats)
    title = metadata_title or (title_line.text if title_line else "")
    outline = Outline(title, encloses)
    skip = title_line if title_line is not None and title == title_line.text else None
    for lines in pages:
        # the title line is not content; a large one is dropped as a heading equal to the title
        _Page([ln for ln in lines if ln is not skip], stats, outline).run()
    return title, outline.finish()


def _first_page_title(pages: list[list[Line]], stats: _Stats) -> Line | None:
    """The largest line near the top of page 1, or a first line that stands alone like a title."""
    first = next((p for p in pages if p), [])
    candidates = [ln for ln in first[:10] if ln.cells is None]
    if not candidates:
        return None
    biggest = max(candidates, key=lambda ln: ln.size)
    if stats.is_large(biggest):
        return biggest
    line = candidates[0]
    standalone = len(candidates) == 1 or stats.paragraph_break(line, candidates[1]) or candidates[1].bold != line.bold
    looks_like_title = len(line.text) <= 100 and not line.text.endswith((*_ENDS_SENTENCE, ",", ";"))
    return line if standalone and looks_like_title else None


class _Page:
    def __init__(self, lines: list[Line], stats: _Stats, outline: Outline) -> None:
        self.lines, self.stats, self.outline = lines, stats, outline
        self.kind: str | None = None
        self.rows: list[str] = []  # table rows, or paragraph lines
        self.items: list[list[Line]] = []  # list items, each its lines
        self.code: list[Line] = []
        self.prev: Line | None = None

    def run(self) -> None:
        i = 0
        while i < len(self.lines):
            ln = self.lines[i]
            key = self._heading_key(i)
            if key is not None:
                self._flush()
                text, i = self._heading_text(i)
                if len(text) > _MAX_HEADING:  # a paragraph set in a large font (pull quote), not a heading
                    self.outline.add(text, "paragraph", ln.page)
                elif not self.outline.is_title(text, loose=key[0] == 0):
                    self.outline.heading(text, key, ln.page)
                self.prev = None
                continue
            if ln.cells is not None:
                if self.kind != "table":
                    self._flush()
                    self.kind = "table"
                self.rows.append(ln.text)
            else:
                self._body_line(ln)
            self.prev = ln
            i += 1
        self._flush()

    def _heading_key(self, i: int) -> HeadingKey | None:
        ln, stats = self.lines[i], self.stats
        if ln.cells is not None:
            return None
        if stats.is_large(ln):
            return stats.heading_sizes.index(ln.size), _numbering(ln.text)
        nxt = self.lines[i + 1] if i + 1 < len(self.lines) else None
        standalone = (
            nxt is not None and len(ln.text) <= 80 and not ln.text.endswith((".", ",", ";"))
            and (self.prev is None or stats.paragraph_break(self.prev, ln) or self.kind is None)
        )  # fmt: skip
        if not standalone or nxt is None:
            return None
        if stats.styled:
            if ln.bold and not nxt.bold and abs(ln.size - stats.body) < 0.6 and not LIST_ITEM.match(ln.text):
                return len(stats.heading_sizes), _numbering(ln.text)
            return None
        numbering = _numbering(ln.text)  # unstyled PDF: only numbered headings are trusted
        return (0, numbering) if numbering and len(ln.text) <= 60 and ln.text[-1:].isalpha() else None

    def _heading_text(self, i: int) -> tuple[str, int]:
        """A heading wrapped over several lines of the same size is one heading."""
        first = self.lines[i]
        parts, j = [first.text], i + 1
        while j < len(self.lines):
            nxt, last = self.lines[j], self.lines[j - 1]
            if nxt.cells is not None or nxt.size != first.size or nxt.bold != first.bold:
                break
            if not self.stats.is_large(first) or last.y - nxt.y > 1.6 * first.size or LIST_ITEM.match(nxt.text):
                break
            parts.append(nxt.text)
            j += 1
        return " ".join(parts), j

    def _body_line(self, ln: Line) -> None:
        prev, stats = self.prev, self.stats
        if ln.mono:
            if self.kind != "code":
                self._flush()
                self.kind = "code"
            self.code.append(ln)
            return
        if LIST_ITEM.match(ln.text):
            if self.kind != "list":
                self._flush()
                self.kind = "list"
            self.items.append([ln])
            return
        if self.kind == "list" and prev is not None:
            marker_x = self.items[-1][0].x
            indented = ln.x >= marker_x + 2
            aligned = ln.x >= marker_x - 2 and not stats.paragraph_break(prev, ln) and ln.bold == prev.bold
            if indented or aligned:
                self.items[-1].append(ln)
                return
        elif self.kind == "paragraph" and prev is not None:
            same_font = abs(ln.size - prev.size) < 0.6 and ln.bold == prev.bold
            if same_font and not stats.paragraph_break(prev, ln):
                self.rows.append(ln.text)
                return
        self._flush()
        self.kind = "paragraph"
        self.rows.append(ln.text)

    def _flush(self) -> None:
        page = self.lines[0].page if self.lines else None
        if self.kind == "table":
            self.outline.add("\n".join(self.rows), "table", page)
        elif self.kind == "paragraph":
            self.outline.add(join_lines(self.rows), "paragraph", page)
        elif self.kind == "list":
            self.outline.add("\n".join(_item_text(item) for item in self.items), "list", page)
        elif self.kind == "code":
            self.outline.add(_code_text(self.code), "code", page)
        self.kind, self.rows, self.items, self.code = None, [], [], []


def _item_text(lines: list[Line]) -> str:
    """An item's wrapped lines joined; a bold label line keeps its own line above the description."""
    out = lines[0].text
    for prev, ln in zip(lines, lines[1:], strict=False):
        out = (out + "\n" + ln.text) if prev.bold and not ln.bold else join_lines([out, ln.text])
    return out


def _code_text(lines: list[Line]) -> str:
    """Monospaced lines kept as lines, their indentation rebuilt from the x offset."""
    left = min(ln.x for ln in lines)
    return "\n".join(" " * round((ln.x - left) / (0.6 * ln.size)) + ln.text for ln in lines)


def join_lines(lines: list[str]) -> str:
    """Re-join lines broken at the page width; a word hyphenated at the line end is mended."""
    out = ""
    for line in lines:
        line = line.strip()
        if not out:
            out = line
        elif out.endswith("-") and len(out) > 1 and out[-2].isalpha() and line[:1].islower():
            out += line
        else:
            out += " " + line
    return out
