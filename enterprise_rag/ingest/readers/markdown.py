"""Markdown reader: YAML front-matter to properties, ATX/setext headings to breadcrumbs.

A whole list, a whole pipe table and a whole fenced code block are one block
each, so the chunker can keep them together; paragraphs are split on blank
lines and their soft line breaks joined, as Markdown renders them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from enterprise_rag.errors import IngestError
from enterprise_rag.ingest.readers.common import Parsed, decode_text
from enterprise_rag.ingest.readers.outline import Outline, by_level

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_HR = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
LIST_ITEM = re.compile(r"^[ \t]{0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)")
_TABLE_SEP = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_QUOTE = re.compile(r"^ {0,3}> ?")
_FRONT = re.compile(r"^---[ \t]*$")
_FRONT_END = re.compile(r"^(?:---|\.\.\.)[ \t]*$")


def read_markdown(raw: bytes, path: Path) -> Parsed:
    """Parse a Markdown file with optional YAML front-matter."""
    text = decode_text(raw, path)
    lines = text.split("\n")
    props, body_start = _front_matter(lines, path)
    body = lines[body_start:]
    fm_title = props.get("title")
    title = str(fm_title).strip() if fm_title not in (None, "") else (_first_h1(body) or path.stem)
    outline = Outline(title, by_level)
    _parse_body(body, outline)
    return Parsed(title=title, blocks=outline.finish(), properties=props)


def _front_matter(lines: list[str], path: Path) -> tuple[dict[str, Any], int]:
    """Properties from a leading ``---`` YAML block, and the index of the first body line."""
    if not lines or not _FRONT.match(lines[0]):
        return {}, 0
    end = next((i for i in range(1, len(lines)) if _FRONT_END.match(lines[i])), None)
    if end is None:
        raise IngestError(str(path), "front-matter opened with '---' on line 1 is never closed with '---'")
    try:
        data = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise IngestError(str(path), f"invalid YAML front-matter{where}: {problem}") from exc
    if data is None:
        return {}, end + 1
    if not isinstance(data, dict):
        raise IngestError(
            str(path), f"front-matter must be a YAML mapping of fields (key: value), got a {type(data).__name__}"
        )
    return {str(k): v for k, v in data.items()}, end + 1


def _first_h1(lines: list[str]) -> str | None:
    in_fence = False
    for line in lines:
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            h = _ATX.match(line)
            if h and len(h.group(1)) == 1 and (h.group(2) or "").strip():
                return (h.group(2) or "").strip()
    return None


def _join_paragraph(lines: list[str]) -> str:
    """Soft line breaks become spaces; a hard break (two trailing spaces or backslash) stays."""
    out = ""
    for line in lines:
        hard = line.endswith("  ") or line.endswith("\\")
        piece = line.strip().rstrip("\\").rstrip()
        out += piece + ("\n" if hard else " ")
    return out.strip()


def _is_table_start(lines: list[str], i: int) -> bool:
    return "|" in lines[i] and i + 1 < len(lines) and "|" in lines[i + 1] and bool(_TABLE_SEP.match(lines[i + 1]))


def _tidy_row(line: str) -> str:
    """A pipe-table row without alignment padding: same table, far fewer tokens."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", body)]
    if _TABLE_SEP.match(line):
        cells = [re.sub(r"-+", "---", c) for c in cells]
    return "| " + " | ".join(cells) + " |"


def _starts_block(lines: list[str], i: int) -> bool:
    line = lines[i]
    return bool(
        _ATX.match(line) or _FENCE.match(line) or _HR.match(line) or _QUOTE.match(line) or _is_table_start(lines, i)
    )


def _parse_body(lines: list[str], outline: Outline) -> None:
    para: list[str] = []

    def flush() -> None:
        if para:
            outline.add(_join_paragraph(para))
            para.clear()

    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            flush()
            i += 1
        elif line.lstrip().startswith("<!--"):
            flush()
            while i < n and "-->" not in lines[i]:
                i += 1
            i += 1
        elif m := _FENCE.match(line):
            flush()
            i = _fenced(lines, i, m.group(1), outline)
        elif h := _ATX.match(line):
            flush()
            heading = (h.group(2) or "").strip()
            level = len(h.group(1))
            if not (level == 1 and outline.is_title(heading, loose=True)):
                outline.heading(heading, level)
            i += 1
        elif para and len(para) == 1 and (s := _SETEXT.match(line)):
            heading, level = para[0].strip(), 1 if s.group(1).startswith("=") else 2
            para.clear()
            if not (level == 1 and outline.is_title(heading, loose=True)):
                outline.heading(heading, level)
            i += 1
        elif _HR.match(line):
            flush()
            i += 1
        elif _is_table_start(lines, i):
            flush()
            j = i
            while j < n and lines[j].strip() and "|" in lines[j]:
                j += 1
            outline.add("\n".join(_tidy_row(x) for x in lines[i:j]), "table")
            i = j
        elif LIST_ITEM.match(line) and not (para and _interrupts_paragraph(line)):
            flush()
            i = _list(lines, i, outline)
        elif _QUOTE.match(line):
            flush()
            i = _quote(lines, i, outline)
        elif not para and (line.startswith("    ") or line.startswith("\t")):
            j = i
            while j < n and (lines[j].startswith(("    ", "\t")) or not lines[j].strip()):
                j += 1
            outline.add("\n".join(x.rstrip() for x in lines[i:j]).strip("\n"), "code")
            i = j
        else:
            para.append(line)
            i += 1
    flush()


def _interrupts_paragraph(line: str) -> bool:
    """A numbered item interrupts a paragraph only when it starts at 1 (CommonMark rule)."""
    m = re.match(r"^[ \t]{0,3}(\d{1,9})[.)]", line)
    return m is not None and m.group(1) != "1"


def _fenced(lines: list[str], i: int, fence: str, outline: Outline) -> int:
    j = i + 1
    while j < len(lines):
        m = _FENCE.match(lines[j])
        closing = m is not None and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)
        if closing and m is not None and not lines[j].strip()[len(m.group(1)) :]:
            break
        j += 1
    outline.add("\n".join(lines[i : j + 1]).rstrip(), "code")
    return j + 1


def _list(lines: list[str], i: int, outline: Outline) -> int:
    """One whole list (items, indented continuations, nested items) as a single block, one line per item: an
    item's soft line breaks become spaces, as a paragraph's do (a hard break, a blank line, a table row or a
    fence inside an item starts a line of its own)."""
    kept: list[str] = []
    j, n = i, len(lines)
    joinable = fenced = False  # joinable: the line before continues on the next line, as the same item
    while j < n:
        line = lines[j]
        if not line.strip():
            k = j
            while k < n and not lines[k].strip():
                k += 1
            if k < n and (LIST_ITEM.match(lines[k]) or lines[k].startswith(("  ", "\t"))):
                j, joinable = k, False
                continue
            break
        nested = bool(LIST_ITEM.match(line.lstrip()))
        if not (LIST_ITEM.match(line) or line.startswith((" ", "\t")) or (kept and not _starts_block(lines, j))):
            break
        if joinable and not nested and not line.strip().startswith(_OWN_LINE):
            kept[-1] += " " + line.strip()
        else:
            kept.append(line.rstrip())
        fenced ^= line.strip().startswith(("```", "~~~"))  # code inside an item keeps its lines
        joinable = not (fenced or line.endswith("  ") or line.endswith("\\") or line.strip().startswith(_OWN_LINE))
        j += 1
    outline.add("\n".join(kept), "list")
    return j


_OWN_LINE = ("|", "```", "~~~", ">")  # lines inside an item that keep a line of their own


def _quote(lines: list[str], i: int, outline: Outline) -> int:
    """A blockquote becomes paragraphs (its '>' markers removed)."""
    inner: list[str] = []
    j = i
    while j < len(lines) and _QUOTE.match(lines[j]):
        inner.append(_QUOTE.sub("", lines[j], count=1))
        j += 1
    para: list[str] = []
    for line in [*inner, ""]:
        if line.strip():
            para.append(line)
        elif para:
            outline.add(_join_paragraph(para))
            para = []
    return j
