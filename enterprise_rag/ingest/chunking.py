"""Structure-first hierarchical chunking: blocks -> parents -> ... -> leaves.

Like LlamaIndex's ``HierarchicalNodeParser`` (level 0 biggest, each level
re-split into the next size), but cut along the document's structure instead
of a fixed token stride:

* chunks are packed from whole blocks; a break goes where a section starts if
  that keeps the section whole, so parents tend to be sections;
* a leaf never crosses a heading boundary, so it has exactly one breadcrumb,
  which is prepended to its search text: a sub-section whose own text never
  names its topic ("6.2 Annual plans") is still found by it;
* a list or table stays whole in a chunk whenever it fits that level's size;
* every parent has at least one child, so every leaf has a full ancestor chain.

A chunk spanning several sections shows their headings inline ("## 6.2 ..."),
so a merged parent still tells the reader which rule belongs to which section.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from enterprise_rag.ingest.splitting import TextSplitter
from enterprise_rag.schema.documents import BlockKind, Chunk, LoadedDocument, inline_heading

CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class _Piece:
    """A block, or a part of one that had to be split, with its token count."""

    text: str
    path: tuple[str, ...]
    page: int | None
    kind: BlockKind
    tokens: int


def build_chunks(
    doc: LoadedDocument,
    document_id: str,
    chunk_sizes: Sequence[int],
    overlap: int,
    count_tokens: CountTokens,
) -> list[Chunk]:
    """All chunks of ``doc``, parents before their children, level by level in document order."""
    sizes = list(chunk_sizes)
    if not sizes or any(s <= 0 for s in sizes) or any(a <= b for a, b in zip(sizes, sizes[1:], strict=False)):
        raise ValueError(f"chunk_sizes must be positive and strictly decreasing, got {sizes}")
    if overlap < 0:
        raise ValueError(f"overlap must be >= 0, got {overlap}")
    builder = _Builder(doc, document_id, count_tokens, TextSplitter(count_tokens, overlap))
    pieces = [
        _Piece(b.text.strip(), b.heading_path, b.page, b.kind, count_tokens(b.text.strip()))
        for b in doc.blocks
        if b.text.strip()
    ]
    last = len(sizes) - 1
    frontier: list[tuple[str | None, list[_Piece]]] = [(None, pieces)] if pieces else []
    for level, size in enumerate(sizes):
        next_frontier: list[tuple[str | None, list[_Piece]]] = []
        for parent_id, group in frontier:
            for child in builder.pack(builder.fit(group, size), size, hard=level == last):
                chunk = builder.emit(child, level, parent_id, is_leaf=level == last)
                next_frontier.append((chunk.chunk_id, child))
        frontier = next_frontier
    return builder.chunks


def chunk_id_for(document_id: str, level: int, position: int, text: str) -> str:
    """Deterministic id: the same content re-ingested gets the same ids."""
    return hashlib.sha256(f"{document_id}|{level}|{position}|{text}".encode()).hexdigest()[:32]


def _common_prefix(paths: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    prefix = paths[0]
    for path in paths[1:]:
        n = 0
        while n < min(len(prefix), len(path)) and prefix[n] == path[n]:
            n += 1
        prefix = prefix[:n]
    return prefix


def render(pieces: Sequence[_Piece]) -> tuple[str, tuple[str, ...]]:
    """(text, common heading path); headings below the common path are written inline."""
    common = _common_prefix([p.path for p in pieces])
    parts: list[str] = []
    prev = common
    for piece in pieces:
        heads = ""
        if piece.path != prev:
            shared = len(_common_prefix([prev, piece.path]))
            depth = max(shared, len(common))
            heads = "".join(inline_heading(d, piece.path[d]) for d in range(depth, len(piece.path)))
        parts.append(heads + piece.text)
        prev = piece.path
    return "\n\n".join(parts), common


class _Builder:
    def __init__(self, doc: LoadedDocument, document_id: str, count: CountTokens, splitter: TextSplitter) -> None:
        self.doc, self.document_id, self.count, self.splitter = doc, document_id, count, splitter
        self.chunks: list[Chunk] = []
        self._positions: dict[int, int] = {}

    def fit(self, pieces: list[_Piece], size: int) -> list[_Piece]:
        """Pieces no bigger than ``size``: bigger ones are split along their structure."""
        out: list[_Piece] = []
        for p in pieces:
            if p.tokens <= size:
                out.append(p)
                continue
            for text in self.splitter.split(p.text, p.kind, size):
                out.append(_Piece(text, p.path, p.page, p.kind, self.count(text)))
        return out

    def _fits(self, pieces: Sequence[_Piece], size: int) -> bool:
        if sum(p.tokens for p in pieces) > size:
            return False
        return len(pieces) == 1 or self.count(render(pieces)[0]) <= size

    def pack(self, pieces: list[_Piece], size: int, hard: bool) -> list[list[_Piece]]:
        """Greedy packing that prefers to break where a section starts (``hard``: always does)."""
        groups: list[list[_Piece]] = []
        current: list[_Piece] = []
        for i, piece in enumerate(pieces):
            if current:
                boundary = piece.path != current[-1].path
                close = (hard and boundary) or not self._fits([*current, piece], size)
                if not close and boundary:
                    run = _section_run(pieces, i, current[-1].path, size)
                    close = run is not None and self._fits(run, size) and not self._fits([*current, *run], size)
                if close:
                    groups.append(current)
                    current = []
            current.append(piece)
        if current:
            groups.append(current)
        return groups

    def emit(self, pieces: list[_Piece], level: int, parent_id: str | None, is_leaf: bool) -> Chunk:
        text, common = render(pieces)
        position = self._positions.get(level, 0)
        self._positions[level] = position + 1
        chunk = Chunk(
            chunk_id=chunk_id_for(self.document_id, level, position, text),
            level=level,
            position=position,
            text=text,
            breadcrumb=" > ".join([self.doc.title, *common]),
            parent_id=parent_id,
            pages=tuple(sorted({p.page for p in pieces if p.page is not None})),
            is_leaf=is_leaf,
        )
        self.chunks.append(chunk)
        return chunk


def _section_run(pieces: list[_Piece], i: int, prev_path: tuple[str, ...], size: int) -> list[_Piece] | None:
    """The pieces of the section starting at ``i``, or None when they cannot fit one chunk anyway."""
    path = pieces[i].path
    depth = min(len(_common_prefix([prev_path, path])) + 1, len(path))
    key = path[:depth]
    j, tokens = i, 0
    while j < len(pieces) and pieces[j].path[:depth] == key:
        tokens += pieces[j].tokens
        if tokens > size:
            return None
        j += 1
    return pieces[i:j]
