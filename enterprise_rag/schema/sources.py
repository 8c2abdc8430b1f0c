"""What the generator reads: numbered sources (corpus passages and web results) and the conversation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

History = Sequence[dict[str, str]]
"""A conversation: ``[{"role": "user" | "assistant", "content": ...}, ...]``, oldest first."""


@dataclass(frozen=True)
class Source:
    """A numbered source as the model sees it and as citations report it."""

    label: str
    text: str
    source: str
    page: int | None
    title: str
    breadcrumb: str
    effective_date: str | None
    status: str
    document_id: str
    kind: str = "corpus"  # or "web"
    node_id: str = ""  # the stored chunk a corpus source came from (web sources have none)
    relative_source: str = ""  # ``source`` as a person reads it: relative to the folder it was ingested from


@dataclass(frozen=True)
class WebResult:
    """One web (or curated) result. ``url`` is the label a citation shows: a URL or a file path."""

    title: str
    url: str
    content: str
    score: float
    published_date: str | None = None
