"""The heading stack every reader shares: headings in, blocks with breadcrumbs out.

Why one place: the nesting rules (a sibling heading closes deeper levels, the
document-title heading is not repeated, an empty section keeps its heading as
a block) must be identical for Markdown, HTML and PDF, or breadcrumbs would
differ by format.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from enterprise_rag.schema.documents import Block, BlockKind

_MARKUP = re.compile(r"[*_`]+")
_SPACE = re.compile(r"\s+")


def normalize_heading(text: str) -> str:
    """Comparable form of a heading: no emphasis markers, folded case, single spaces."""
    return _SPACE.sub(" ", _MARKUP.sub("", text)).strip().rstrip(":").strip().casefold()


def clean_heading(text: str) -> str:
    """Heading text for breadcrumbs: emphasis markers and extra spaces removed."""
    return _SPACE.sub(" ", _MARKUP.sub("", text)).strip()


@dataclass
class _Entry:
    text: str
    key: Any
    page: int | None = None
    has_content: bool = False


class Outline:
    """Collects blocks in reading order under the current heading path.

    ``encloses(outer_key, inner_key)`` says whether a heading with ``outer_key``
    stays an ancestor when a heading with ``inner_key`` arrives; Markdown and
    HTML use levels (``outer < inner``), PDF uses font rank plus numbering.
    """

    def __init__(self, title: str, encloses: Callable[[Any, Any], bool]) -> None:
        self._title_key = normalize_heading(title)
        self._encloses = encloses
        self._stack: list[_Entry] = []
        self.blocks: list[Block] = []

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(e.text for e in self._stack)

    def is_title(self, text: str, loose: bool = False) -> bool:
        """Whether a heading repeats the document title (it is then left out of paths).

        ``loose`` (for top-level headings) also accepts the title followed by a
        qualifier, e.g. "Refund Policy (2025)" under the title "Refund Policy":
        version and status travel in metadata, not in every breadcrumb.
        """
        key = normalize_heading(text)
        if key == self._title_key:
            return True
        return loose and bool(self._title_key) and key.startswith(self._title_key + " ")

    def heading(self, text: str, key: Any, page: int | None = None) -> None:
        """Open a section; closes every open section that does not enclose it."""
        text = clean_heading(text)
        if not text:
            return
        while self._stack and not self._encloses(self._stack[-1].key, key):
            self._close()
        self._stack.append(_Entry(text, key, page))

    def add(self, text: str, kind: BlockKind = "paragraph", page: int | None = None) -> None:
        """Add one block under the current path; blank text is ignored."""
        if not text.strip():
            return
        for entry in self._stack:
            entry.has_content = True
        self.blocks.append(Block(text=text.strip("\n"), heading_path=self.path, page=page, kind=kind))

    def finish(self) -> list[Block]:
        """Close all sections and return the blocks."""
        while self._stack:
            self._close()
        return self.blocks

    def _close(self) -> None:
        entry = self._stack.pop()
        if not entry.has_content:
            # A heading with nothing under it still carries information (e.g. "Appendix: none").
            for parent in self._stack:
                parent.has_content = True
            self.blocks.append(Block(text=entry.text, heading_path=self.path, page=entry.page, kind="heading"))


def by_level(outer: int, inner: int) -> bool:
    """Nesting rule of numbered heading levels (h1..h6, # .. ######)."""
    return outer < inner
