"""HTML reader (BeautifulSoup, stdlib parser): the main content, not the page chrome.

Navigation, headers, footers, asides, scripts and styles are dropped so that
menus and cookie banners are not indexed as if they were policy text. Headings
h1-h6 build breadcrumbs; a list or a table is one block each. BeautifulSoup is
imported by the functions that walk a page, so importing the ingest path does
not load it (nor its CSS selector engine) until an HTML file is read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from enterprise_rag.ingest.readers.common import Parsed, decode_text, table_text
from enterprise_rag.ingest.readers.outline import Outline, by_level

if TYPE_CHECKING:
    from bs4 import NavigableString, Tag

_DROP = ["script", "style", "nav", "aside", "noscript", "template", "svg", "iframe", "button"]
_CHROME = ["header", "footer"]  # page chrome, unless inside the article (an article's header holds its h1)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_INLINE = {
    "a", "abbr", "b", "bdi", "bdo", "br", "cite", "code", "data", "del", "dfn", "em", "font", "i", "ins",
    "kbd", "mark", "q", "s", "samp", "small", "span", "strong", "sub", "sup", "time", "u", "var", "wbr", "img",
    "label", "input", "select", "textarea", "output", "meter", "progress",
}  # fmt: skip
_CHARSET = re.compile(rb"""<meta[^>]+charset=["']?([A-Za-z0-9_\-]+)""", re.IGNORECASE)
_WS = re.compile(r"\s+")


def read_html(raw: bytes, path: Path) -> Parsed:
    """Parse an HTML file (UTF-8, or the charset its <meta> declares)."""
    from bs4 import BeautifulSoup, Tag

    declared = _CHARSET.search(raw[:4096])
    text = decode_text(raw, path, declared.group(1).decode("ascii") if declared else None)
    soup = BeautifulSoup(text, "html.parser")
    for tag in soup.find_all(_DROP):
        tag.decompose()
    for tag in soup.find_all(_CHROME):
        if not tag.decomposed and tag.find_parent(["main", "article"]) is None:
            tag.decompose()
    root = soup.find("main") or soup.find("article") or soup.body or soup
    title_tag = soup.find("title")
    first_h1 = root.find("h1") if isinstance(root, Tag) else None
    title = _text(title_tag) if isinstance(title_tag, Tag) else ""
    if not title and isinstance(first_h1, Tag):
        title = _text(first_h1)
    title = title or path.stem
    outline = Outline(title, by_level)
    if isinstance(root, Tag):
        _Walker(outline).container(root)
    return Parsed(title=title, blocks=outline.finish())


def _text(node: Tag | NavigableString) -> str:
    """Visible text of a node with whitespace collapsed (``<br>`` becomes a line break)."""
    from bs4 import NavigableString, Tag
    from bs4.element import Comment, Doctype, ProcessingInstruction

    if isinstance(node, NavigableString):
        return " ".join(str(node).split())
    parts: list[str] = []
    for child in node.descendants:
        if isinstance(child, (Comment, Doctype, ProcessingInstruction)):
            continue
        if isinstance(child, NavigableString):
            parts.append(_WS.sub(" ", str(child)))  # source line breaks are just spaces in HTML
        elif isinstance(child, Tag) and child.name == "br":
            parts.append("\n")
    joined = "".join(parts)
    return "\n".join(" ".join(line.split()) for line in joined.split("\n") if line.strip())


class _Walker:
    """Walks block-level elements in document order, collecting loose inline text as paragraphs."""

    def __init__(self, outline: Outline) -> None:
        self.outline = outline

    def container(self, node: Tag) -> None:
        from bs4 import NavigableString, Tag
        from bs4.element import Comment, Doctype, ProcessingInstruction

        inline: list[str] = []

        def flush() -> None:
            text = " ".join(" ".join(inline).split())
            if text:
                self.outline.add(text)
            inline.clear()

        for child in node.children:
            if isinstance(child, (Comment, Doctype, ProcessingInstruction)):
                continue
            if isinstance(child, NavigableString):
                inline.append(str(child))
            elif isinstance(child, Tag) and child.name in _INLINE:
                inline.append(_text(child).replace("\n", " "))
            elif isinstance(child, Tag):
                flush()
                self.block(child)
        flush()

    def block(self, node: Tag) -> None:
        name = node.name
        if name in _HEADINGS:
            text = _text(node).replace("\n", " ")
            if not (name == "h1" and self.outline.is_title(text, loose=True)):
                self.outline.heading(text, _HEADINGS[name])
        elif name == "p":
            self.outline.add(_text(node))
        elif name in ("ul", "ol", "dl"):
            self.outline.add("\n".join(_list_lines(node, 0)), "list")
        elif name == "table":
            self.outline.add(_table(node), "table")
        elif name == "pre":
            self.outline.add(node.get_text().strip("\n"), "code")
        elif name == "hr":
            return
        else:  # div, section, blockquote, figure, ...: look inside
            self.container(node)


def _list_lines(node: Tag, depth: int) -> list[str]:
    """Items as '- text' / '1. text' lines, nested lists indented under their item."""
    lines: list[str] = []
    ordered = node.name == "ol"
    start = str(node.get("start") or "1")
    number = int(start) if start.isdigit() else 1
    for child in node.find_all(["li", "dt", "dd"], recursive=False):
        nested = child.find_all(["ul", "ol"], recursive=False) if child.name == "li" else []
        for sub in nested:
            sub.extract()
        text = _text(child).replace("\n", " ")
        if child.name == "dd":
            marker = "  "
        elif ordered:
            marker = f"{number}. "
            number += 1
        else:
            marker = "- "
        if text:
            lines.append("  " * depth + marker + text)
        for sub in nested:
            lines.extend(_list_lines(sub, depth + 1))
    return lines


def _table(node: Tag) -> str:
    """One line per row, cells joined with ' | ' (caption first when there is one)."""
    from bs4 import Tag

    rows: list[list[str]] = []
    caption = node.find("caption")
    if isinstance(caption, Tag) and _text(caption):
        rows.append([_text(caption).replace("\n", " ")])
    for tr in node.find_all("tr"):
        if tr.find_parent("table") is not node:
            continue  # rows of a nested table are read with that table's cell
        rows.append([_text(c).replace("\n", " ") for c in tr.find_all(["th", "td"], recursive=False)])
    return table_text(rows)
