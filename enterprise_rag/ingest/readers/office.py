"""What the Office readers share: opening an Office Open XML package with refusals a person can act
on, and the text of a WordprocessingML / DrawingML element as it reads in the final document."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from enterprise_rag.errors import IngestError

T = TypeVar("T")

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # a Compound File: legacy .doc/.xls/.ppt, or an encrypted package
_ENCRYPTED_STREAM = "EncryptedPackage".encode("utf-16-le")


def open_package(raw: bytes, path: Path, kind: str, opener: Callable[[io.BytesIO], T]) -> T:
    """``opener`` applied to the file's bytes; an encrypted, legacy-binary or corrupt file is an
    :class:`IngestError` naming the file and the reason."""
    where = str(path)
    if raw.startswith(_OLE_MAGIC):
        if _ENCRYPTED_STREAM in raw:
            raise IngestError(where, f"{kind} is encrypted (password-protected); remove the password and ingest again")
        raise IngestError(
            where, f"legacy binary Office file, not Office Open XML: save it as {path.suffix.lower()} (Office 2007+)"
        )
    if not raw.startswith(b"PK"):
        raise IngestError(where, f"not a {kind}: no ZIP header (corrupt or mislabelled file)")
    try:
        return opener(io.BytesIO(raw))
    except IngestError:
        raise
    except _package_errors() as exc:
        raise IngestError(where, f"corrupt or unreadable {kind} ({type(exc).__name__}: {exc})") from exc


def _package_errors() -> tuple[type[BaseException], ...]:
    from lxml.etree import LxmlError

    return (zipfile.BadZipFile, zipfile.LargeZipFile, KeyError, ValueError, TypeError, AttributeError, LxmlError,
            EOFError, OSError, IndexError)  # fmt: skip


_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
# Text as it reads once tracked changes are accepted: inserted runs count, deleted and moved-away runs do
# not (Word keeps their text in w:delText or inside w:del / w:moveFrom), nor the fallback copy of content
# that markup compatibility stores twice. Comments live in their own part and never appear here.
_TEXT = (
    "(.//w:t | .//w:tab | .//w:br | .//w:cr | .//a:t | .//a:br)"
    "[not(ancestor::w:del) and not(ancestor::w:moveFrom) and not(ancestor::mc:Fallback)]"
)
_NAMESPACES = {"w": _W, "a": _A, "mc": _MC}
_text_nodes: Any = None  # the compiled XPath, made on first use (lxml comes with the Office libraries)


def element_text(element: Any) -> str:
    """The visible text of an XML element: runs in order, tabs as spaces, breaks as newlines."""
    global _text_nodes
    if _text_nodes is None:
        from lxml.etree import XPath

        _text_nodes = XPath(_TEXT, namespaces=_NAMESPACES)
    parts = []
    for node in _text_nodes(element):
        name = node.tag.rsplit("}", 1)[-1]
        parts.append(node.text or "" if name == "t" else " " if name == "tab" else "\n")
    return "".join(parts)


def one_line(text: str) -> str:
    """A table cell or list item on one line, runs of spaces collapsed."""
    return " ".join(text.split())
