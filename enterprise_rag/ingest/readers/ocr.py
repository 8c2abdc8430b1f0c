"""Text for PDF pages that carry only images (scans): Tesseract, when it is installed.

OCR is optional: the ``ocr`` extra (pytesseract, Pillow) and the system's Tesseract (Debian:
``apt install tesseract-ocr``). Without them a scanned page is not silently empty: the reader reports it
("page 3 has no text layer") and the rest of the document is ingested. With them the page's images are
read and the page says so in the report too, since OCR text can be wrong. A page with neither text nor
images is blank and reported by nobody.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from enterprise_rag.ingest.readers.pdf_layout import Line

logger = logging.getLogger(__name__)


def ocr_text(page: Any, number: int) -> tuple[str, str | None]:
    """The text of a page with no text layer, and what the report should say about it."""
    if not _has_images(page):
        return "", None
    tesseract = _tesseract()
    if tesseract is None:
        return "", (f"page {number} has no text layer (a scanned image?) and is left out; "
                    "install the ocr extra and Tesseract to read it")  # fmt: skip
    try:
        text = "\n\n".join(tesseract.image_to_string(image.image) for image in page.images)
    except Exception as exc:  # noqa: BLE001 - any failure of an external OCR engine loses one page, not the file
        logger.warning("page %d: OCR failed: %s", number, exc)
        return "", f"page {number} has no text layer and OCR failed ({type(exc).__name__}); it is left out"
    if not text.strip():
        return "", f"page {number} has no text layer and OCR found no text on it"
    return text, f"page {number} has no text layer: its text was read by OCR"


def lines_of(text: str, number: int, size: float) -> list[Line]:
    """OCR output as page lines in the body font ``size`` of the document's text pages (so the layout reads
    them as body text, not headings), top to bottom; a blank line leaves a paragraph gap."""
    lines: list[Line] = []
    y = 800.0
    for raw in text.splitlines():
        y -= 1.2 * size
        if raw.strip():
            lines.append(Line(text=" ".join(raw.split()), x=0.0, y=y, size=size, bold=False, page=number))
        else:
            y -= 1.2 * size
    return lines


def _has_images(page: Any) -> bool:
    try:
        objects = page["/Resources"].get_object().get("/XObject")
        objects = objects.get_object() if objects is not None else {}
        return any(objects[name].get_object().get("/Subtype") == "/Image" for name in objects)
    except (KeyError, AttributeError, TypeError, ValueError):
        return False


@functools.cache
def _tesseract() -> Any:
    """pytesseract when it and the tesseract binary are installed, else None."""
    try:
        import pytesseract

        pytesseract.get_tesseract_version()
    except Exception:  # noqa: BLE001 - ImportError, TesseractNotFoundError, a broken install: OCR is off
        return None
    return pytesseract
