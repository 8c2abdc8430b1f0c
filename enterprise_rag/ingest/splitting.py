"""Split one block's text that is too big for a chunk size, along its own structure.

Tables split between rows (the header row is repeated on every piece, so a
row never loses its column names), lists between items, code between lines,
and prose by sentences with LlamaIndex's :class:`SentenceSplitter`. Only a
single sentence, row or line that is itself too big is cut further.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from llama_index.core.node_parser import SentenceSplitter

from enterprise_rag.schema.documents import BlockKind
from enterprise_rag.text import LIST_ITEM

CountTokens = Callable[[str], int]

_MD_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")


class TextSplitter:
    """Splits text of a given kind into pieces of at most ``size`` tokens."""

    def __init__(self, count_tokens: CountTokens, overlap: int) -> None:
        self._count = count_tokens
        self._overlap = overlap
        self._sentence_splitters: dict[int, SentenceSplitter] = {}

    def split(self, text: str, kind: BlockKind, size: int) -> list[str]:
        """Pieces of ``text``, each within ``size`` tokens (the text itself when it already fits)."""
        if self._count(text) <= size:
            return [text]
        if kind == "table":
            pieces = self._table(text, size)
        elif kind == "list":
            pieces = self._pack(_list_items(text), size, "\n")
        elif kind == "code":
            pieces = self._pack(text.split("\n"), size, "\n")
        else:
            pieces = self._sentences(text, size)
        return [p for p in pieces if p.strip()]

    def _table(self, text: str, size: int) -> list[str]:
        rows = text.split("\n")
        head = 2 if len(rows) > 2 and _MD_TABLE_SEP.match(rows[1]) and "|" in rows[1] else 1
        header = "\n".join(rows[:head])
        if self._count(header) > size // 2:  # a huge header would crowd out the rows
            return self._pack(rows, size, "\n")
        return self._pack(rows[head:], size, "\n", prefix=header)

    def _pack(self, units: list[str], size: int, sep: str, prefix: str = "") -> list[str]:
        """Greedily join units into pieces <= size; a unit too big on its own is split by sentences."""
        out: list[str] = []
        current: list[str] = []

        def text_of(parts: list[str]) -> str:
            return sep.join([prefix, *parts] if prefix else parts)

        for unit in units:
            if not unit.strip():
                continue
            if current and self._count(text_of([*current, unit])) <= size:
                current.append(unit)
                continue
            if current:
                out.append(text_of(current))
                current = []
            if self._count(text_of([unit])) <= size:
                current = [unit]
            else:
                out.extend(self._sentences(unit, size))
        if current:
            out.append(text_of(current))
        return out

    def _sentences(self, text: str, size: int) -> list[str]:
        splitter = self._sentence_splitters.get(size)
        if splitter is None:
            count = self._count
            splitter = SentenceSplitter(
                chunk_size=size,
                chunk_overlap=min(self._overlap, size // 4),
                tokenizer=lambda s: range(count(s)),  # SentenceSplitter only takes len() of the result
            )
            self._sentence_splitters[size] = splitter
        pieces: list[str] = []
        for piece in splitter.split_text(text):
            pieces.extend(self._halve_until_fits(piece.strip(), size))
        return pieces

    def _halve_until_fits(self, text: str, size: int) -> list[str]:
        """Last resort for the splitter's token estimate being off by a few: cut at a word boundary."""
        if self._count(text) <= size:
            return [text]
        words = text.split(" ")
        if len(words) < 2:
            middle = len(text) // 2
            return self._halve_until_fits(text[:middle], size) + self._halve_until_fits(text[middle:], size)
        middle = len(words) // 2
        return self._halve_until_fits(" ".join(words[:middle]), size) + self._halve_until_fits(
            " ".join(words[middle:]), size
        )


def _list_items(text: str) -> list[str]:
    """Top-level items with their continuation lines and nested items attached."""
    lines = text.split("\n")
    first = LIST_ITEM.match(lines[0])
    indent = len(first.group(1)) if first else 0
    items: list[str] = []
    for line in lines:
        m = LIST_ITEM.match(line)
        if items and not (m and len(m.group(1)) <= indent):
            items[-1] += "\n" + line
        else:
            items.append(line)
    return items
