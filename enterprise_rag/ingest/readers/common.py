"""What every reader returns, and the byte checks text formats share.

Text is decoded strictly: a file that is not valid UTF-8 is refused with the
offset of the first bad byte rather than silently "repaired", because replaced
characters end up in answers and citations.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from enterprise_rag.errors import IngestError
from enterprise_rag.schema.documents import Block


@dataclass
class Parsed:
    """A reader's result; :func:`read_document` adds source and content hash."""

    title: str
    blocks: list[Block]
    properties: dict[str, Any] = field(default_factory=dict)
    page_count: int | None = None
    warnings: list[str] = field(default_factory=list)  # what was read with a loss ("page 3 has no text layer")


def decode_text(raw: bytes, path: Path, fallback_encoding: str | None = None) -> str:
    """Decode a text file as UTF-8 (BOM allowed; UTF-16 only with a BOM), newlines normalised.

    ``fallback_encoding`` is an encoding the file itself declares (HTML ``<meta charset>``);
    it is tried only when UTF-8 fails.
    """
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            text = raw.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise IngestError(str(path), f"not valid UTF-16 text despite its byte-order mark ({exc.reason})") from exc
    else:
        if b"\x00" in raw:
            offset = raw.index(b"\x00")
            raise IngestError(
                str(path),
                f"contains binary data (NUL byte at offset {offset}); this is not a {path.suffix} text file",
            )
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            declared = _declared(raw, fallback_encoding)
            if declared is None:
                bad = raw[exc.start : exc.start + 1].hex()
                raise IngestError(
                    str(path),
                    f"not valid UTF-8 (byte 0x{bad} at offset {exc.start}); re-save the file as UTF-8",
                ) from exc
            text = declared
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _declared(raw: bytes, encoding: str | None) -> str | None:
    if not encoding or codecs.lookup(encoding).name == "utf-8":
        return None
    try:
        return raw.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return None


def table_text(rows: list[list[str]]) -> str:
    """A table as readers hand it to the chunker: one line per row, cells joined with ' | ', the first row
    the header (the splitter repeats it on every piece); rows with no text are left out."""
    return "\n".join(" | ".join(row) for row in rows if any(cell.strip() for cell in row))


def human_size(n: float) -> str:
    """Sizes in the unit people read them in (MB = 1024 * 1024 bytes, as the config means it)."""
    if n < 1024:
        return f"{int(n)} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / (1024 * 1024):.1f} MB"


def human_limit(n: float) -> str:
    """A configured limit without a trailing '.0' ("25 MB", "1.5 KB")."""
    return human_size(n).replace(".0 ", " ")
