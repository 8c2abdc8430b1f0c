"""Read a file into a :class:`LoadedDocument`: one reader per format, chosen by suffix.

Every refusal is an :class:`IngestError` carrying the path and a reason a
person can act on (too big, empty, not UTF-8, encrypted PDF, ...), so one bad
file in a folder is reported instead of sinking the batch or being indexed as
garbage.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from enterprise_rag.errors import IngestError
from enterprise_rag.ingest.readers.common import Parsed, human_limit, human_size
from enterprise_rag.ingest.readers.html import read_html
from enterprise_rag.ingest.readers.markdown import read_markdown
from enterprise_rag.ingest.readers.pdf import read_pdf
from enterprise_rag.ingest.readers.plaintext import read_plaintext
from enterprise_rag.ingest.readers.sheets import read_csv, read_workbook
from enterprise_rag.ingest.readers.slides import read_slides
from enterprise_rag.ingest.readers.word import read_word
from enterprise_rag.schema.documents import LoadedDocument

Reader = Callable[[bytes, Path], Parsed]

READERS: dict[str, Reader] = {
    ".pdf": read_pdf,
    ".md": read_markdown,
    ".markdown": read_markdown,
    ".html": read_html,
    ".htm": read_html,
    ".txt": read_plaintext,
    ".text": read_plaintext,
    ".docx": read_word,
    ".pptx": read_slides,
    ".xlsx": read_workbook,
    ".csv": read_csv,
}

SUPPORTED_SUFFIXES: frozenset[str] = frozenset(READERS)

__all__ = ["READERS", "SUPPORTED_SUFFIXES", "read_document"]


def read_document(path: Path, max_bytes: int) -> LoadedDocument:
    """Read and parse one file; raise :class:`IngestError` with the reason when it cannot be used."""
    path = Path(path)
    where = str(path)
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        kinds = ", ".join(sorted(SUPPORTED_SUFFIXES))
        raise IngestError(where, f"unsupported file type {path.suffix or '(no suffix)'!r} (supported: {kinds})")
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise IngestError(where, f"file is {human_size(size)}, over the {human_limit(max_bytes)} limit")
        with path.open("rb") as fh:
            raw = fh.read(max_bytes + 1)  # never more than the limit, even if the file grew after stat
    except FileNotFoundError as exc:
        raise IngestError(where, "no such file") from exc
    except IsADirectoryError as exc:
        raise IngestError(where, "is a folder, not a file") from exc
    except OSError as exc:
        raise IngestError(where, f"cannot read file: {exc.strerror or exc}") from exc
    if len(raw) > max_bytes:  # grew between stat and read
        raise IngestError(where, f"file grew past the {human_limit(max_bytes)} limit while being read")
    if not raw:
        raise IngestError(where, "file is empty (0 bytes)")
    parsed = reader(raw, path)
    blocks = [b for b in parsed.blocks if b.text.strip()]
    if not blocks:
        raise IngestError(where, "no extractable text: the file is empty or contains only whitespace/markup")
    return LoadedDocument(
        source=where,
        title=parsed.title.strip() or path.stem,
        blocks=blocks,
        content_hash=hashlib.sha256(raw).hexdigest(),
        properties=parsed.properties,
        page_count=parsed.page_count,
        warnings=parsed.warnings,
    )
