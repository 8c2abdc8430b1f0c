"""The curated-source web fallback: a local folder of vetted documents searched with BM25.

Nothing leaves the machine, so it needs no egress permission. Documents are
read with the ingest readers (so HTML chrome is not indexed); front-matter
``url:`` / ``title:`` / ``date:`` label the results.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from enterprise_rag.errors import IngestError, WebSearchError
from enterprise_rag.ingest.readers import READERS
from enterprise_rag.ingest.readers.common import decode_text
from enterprise_rag.schema.sources import WebResult
from enterprise_rag.text import terms

logger = logging.getLogger(__name__)

# --- curated local sources -------------------------------------------------------------------------

CURATED_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".text", ".html", ".htm"})
_FRONT = re.compile(r"\A---[ \t]*\n(.*?)\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
_CANONICAL = re.compile(
    r"""<link\b[^>]*\brel=["']?canonical["']?[^>]*\bhref=["']([^"']+)["']"""
    r"""|<link\b[^>]*\bhref=["']([^"']+)["'][^>]*\brel=["']?canonical""",
    re.IGNORECASE,
)
_PASSAGE_CHARS = 1200
_MAX_FILE_BYTES = 5 * 1024 * 1024
_K1, _B = 1.5, 0.75


@dataclass(frozen=True)
class _Passage:
    doc: int
    text: str
    tf: Counter[str]
    length: int


@dataclass(frozen=True)
class _Doc:
    title: str
    label: str
    published_date: str | None


@dataclass
class _Index:
    docs: list[_Doc]
    passages: list[_Passage]
    df: Counter[str]
    avg_len: float

    def idf(self, term: str) -> float:
        n = len(self.passages)
        df = self.df.get(term, 0)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


class CuratedWebSearch:
    """Search a local folder of curated documents: the enterprise alternative to a web API.

    Each ``.md`` / ``.txt`` / ``.html`` file under ``folder`` may start with YAML
    front-matter giving ``url:`` (the label results carry; else the file path, or an
    HTML file's canonical link), ``title:`` and ``date:`` / ``published_date:``.
    Files are split into passages and ranked with BM25 (k1=1.5, b=0.75) over words;
    each document contributes its best passage. ``score`` is the idf-weighted share
    of the query's terms the passage contains (0..1), comparable across queries.
    The index is built on first use and rebuilt when a file changes.
    """

    leaves_machine = False

    def __init__(self, folder: str | Path, max_results: int = 5) -> None:
        self.folder = Path(folder).expanduser()
        if not self.folder.is_dir():
            raise WebSearchError(f"curated web search folder {self.folder} does not exist or is not a folder")
        if max_results < 1:
            raise ValueError("max_results must be at least 1")
        self.max_results = max_results
        self._lock = threading.Lock()
        self._signature: tuple[tuple[str, int, int], ...] | None = None
        self._index: _Index | None = None

    def __repr__(self) -> str:
        return f"CuratedWebSearch(folder={str(self.folder)!r}, max_results={self.max_results})"

    def search(self, query: str, max_results: int | None = None) -> list[WebResult]:
        limit = max_results or self.max_results
        query_terms = list(dict.fromkeys(terms(query)))
        if not query_terms:
            return []
        index = self._current_index()
        if not index.passages:
            return []
        idf = {t: index.idf(t) for t in query_terms}
        total_idf = sum(idf.values())
        best: dict[int, tuple[float, float, _Passage]] = {}
        for passage in index.passages:
            bm25 = 0.0
            covered = 0.0
            for t in query_terms:
                f = passage.tf.get(t, 0)
                if not f:
                    continue
                norm = _K1 * (1 - _B + _B * passage.length / index.avg_len)
                bm25 += idf[t] * f * (_K1 + 1) / (f + norm)
                covered += idf[t]
            if bm25 > 0 and (passage.doc not in best or bm25 > best[passage.doc][0]):
                best[passage.doc] = (bm25, covered / total_idf if total_idf else 0.0, passage)
        ranked = sorted(best.values(), key=lambda x: (-x[0], index.docs[x[2].doc].label))
        results = []
        for _, share, passage in ranked[:limit]:
            doc = index.docs[passage.doc]
            results.append(
                WebResult(
                    title=doc.title,
                    url=doc.label,
                    content=passage.text,
                    score=round(share, 4),
                    published_date=doc.published_date,
                )
            )
        return results

    # -- indexing --

    def _files(self) -> list[Path]:
        if not self.folder.is_dir():
            raise WebSearchError(f"curated web search folder {self.folder} no longer exists")
        return sorted(
            p
            for p in self.folder.rglob("*")
            if p.suffix.lower() in CURATED_SUFFIXES
            and p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(self.folder).parts)
        )

    def _current_index(self) -> _Index:
        with self._lock:
            files = self._files()
            signature = tuple(_stamp(p) for p in files)
            if self._index is None or signature != self._signature:
                self._index = self._build(files)
                self._signature = signature
            return self._index

    def _build(self, files: list[Path]) -> _Index:
        docs: list[_Doc] = []
        passages: list[_Passage] = []
        for path in files:
            try:
                doc, texts = _read_curated(path)
            except (IngestError, OSError, ValueError) as exc:
                logger.warning("curated web source skipped: %s (%s)", path, exc)
                continue
            number = len(docs)
            docs.append(doc)
            title_terms = terms(doc.title)
            for text, headings in texts:
                words = terms(text) + title_terms + terms(" ".join(headings))
                if words:
                    passages.append(_Passage(number, text, Counter(words), len(words)))
        df: Counter[str] = Counter()
        for passage in passages:
            df.update(passage.tf.keys())
        avg = sum(p.length for p in passages) / len(passages) if passages else 1.0
        logger.info(
            "curated web search: indexed %d passages from %d files in %s", len(passages), len(docs), self.folder
        )
        return _Index(docs=docs, passages=passages, df=df, avg_len=avg)


def _stamp(path: Path) -> tuple[str, int, int]:
    try:
        st = path.stat()
    except OSError:  # vanished since the listing: the next search sees the change
        return (str(path), -1, -1)
    return (str(path), st.st_mtime_ns, st.st_size)


def _read_curated(path: Path) -> tuple[_Doc, list[tuple[str, tuple[str, ...]]]]:
    """One curated file: its label, title, date and passages (text, heading path)."""
    raw = path.read_bytes()
    if len(raw) > _MAX_FILE_BYTES:
        raise ValueError(f"over {_MAX_FILE_BYTES // (1024 * 1024)} MB")
    text = decode_text(raw, path)
    front: dict[str, Any] = {}
    match = _FRONT.match(text)
    if match:
        loaded = yaml.safe_load(match.group(1))
        if isinstance(loaded, dict):
            front = {str(k).lower(): v for k, v in loaded.items()}
        text = text[match.end() :]
    parsed = READERS[path.suffix.lower()](text.encode("utf-8"), path)
    url = front.get("url")
    if not (isinstance(url, str) and url.strip()) and path.suffix.lower() in (".html", ".htm"):
        canonical = _CANONICAL.search(text)
        url = (canonical.group(1) or canonical.group(2)) if canonical else None
    label = url.strip() if isinstance(url, str) and url.strip() else str(path)
    title = front.get("title")
    title = str(title).strip() if title not in (None, "") else (parsed.title.strip() or path.stem)
    date = front.get("published_date") or front.get("date") or front.get("effective_date")
    published = date.isoformat() if isinstance(date, (dt.date, dt.datetime)) else (str(date) if date else None)
    return _Doc(title=title, label=label, published_date=published), _passages(parsed.blocks)


def _passages(blocks: Iterable[Any]) -> list[tuple[str, tuple[str, ...]]]:
    """Group consecutive blocks under the same headings into passages of about ``_PASSAGE_CHARS``."""
    out: list[tuple[str, tuple[str, ...]]] = []
    buf: list[str] = []
    size = 0
    heads: tuple[str, ...] = ()

    def flush() -> None:
        nonlocal buf, size
        if buf:
            out.append(("\n\n".join(buf), heads))
        buf, size = [], 0

    for block in blocks:
        text = block.text.strip()
        if not text:
            continue
        path = tuple(block.heading_path)
        if path != heads or size + len(text) > _PASSAGE_CHARS:
            flush()
            heads = path
        for piece in _split_long(text):
            if size and size + len(piece) > _PASSAGE_CHARS:
                flush()
            buf.append(piece)
            size += len(piece)
    flush()
    return out


def _split_long(text: str) -> list[str]:
    if len(text) <= _PASSAGE_CHARS:
        return [text]
    pieces, current = [], ""
    for word in text.split():
        if current and len(current) + 1 + len(word) > _PASSAGE_CHARS:
            pieces.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        pieces.append(current)
    return pieces
