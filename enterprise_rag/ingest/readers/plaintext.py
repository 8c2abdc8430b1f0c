"""Plain-text reader: paragraphs split on blank lines, conservative heading detection.

Plain text has no markup, so only unmistakable headings are recognised
(numbered like "2.1 Scope", ALL CAPS, or underlined with === / ---); a wrong
heading would put a misleading breadcrumb on every chunk under it.
"""

from __future__ import annotations

import re
from pathlib import Path

from enterprise_rag.ingest.readers.common import Parsed, decode_text
from enterprise_rag.ingest.readers.outline import Outline, by_level
from enterprise_rag.schema.documents import BlockKind
from enterprise_rag.text import LIST_ITEM

_NUMBERED = re.compile(r"^(\d+(?:\.\d+)*)\.?\s+\S")
_UNDERLINE = re.compile(r"^\s*(=+|-+)\s*$")
_TERMINAL = (".", "!", "?", ",", ";", ":")


def read_plaintext(raw: bytes, path: Path) -> Parsed:
    """Parse a UTF-8 text file."""
    paragraphs = [p.strip("\n") for p in re.split(r"\n[ \t]*\n", decode_text(raw, path)) if p.strip()]
    title = path.stem
    if paragraphs and _looks_like_title(paragraphs[0]):
        title = paragraphs.pop(0).strip()
    outline = Outline(title, by_level)
    for para in paragraphs:
        lines = para.split("\n")
        heading = _heading(lines)
        if heading is not None:
            text, level, rest = heading
            outline.heading(text, level)
            if rest:
                outline.add("\n".join(rest).strip(), _kind(rest))
        else:
            outline.add(para.strip(), _kind(lines))
    return Parsed(title=title, blocks=outline.finish())


def _looks_like_title(para: str) -> bool:
    """A short first line on its own, without sentence punctuation at the end."""
    text = para.strip()
    return "\n" not in text and len(text) <= 100 and len(text.split()) <= 14 and not text.endswith(_TERMINAL)


def _heading(lines: list[str]) -> tuple[str, int, list[str]] | None:
    """(heading, level, remaining lines) when the paragraph opens with an unmistakable heading."""
    first = lines[0].strip()
    if not first or len(first) > 80 or first.endswith(_TERMINAL):
        return None
    if len(lines) >= 2 and _UNDERLINE.match(lines[1]) and len(lines[1].strip()) >= 3:
        return first, 1 if "=" in lines[1] else 2, lines[2:]
    if len(lines) != 1:
        return None
    numbered = _NUMBERED.match(first)
    if numbered:
        return first, min(6, numbered.group(1).count(".") + 1), []
    letters = [c for c in first if c.isalpha()]
    if len(letters) >= 3 and all(c.isupper() for c in letters):
        return first, 1, []
    return None


def _kind(lines: list[str]) -> BlockKind:
    """A paragraph whose first line is a list item is a list (continuation lines included)."""
    return "list" if lines and LIST_ITEM.match(lines[0]) else "paragraph"
