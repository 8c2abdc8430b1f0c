"""The web fallback's results: those of every phrasing of the query, merged."""

from __future__ import annotations

from collections.abc import Callable

from enterprise_rag.schema.sources import WebResult

WebSearch = Callable[[str], list[WebResult]]
"""Results for one query from the configured web source (none when it is disabled); raises WebSearchError."""


def search_all(search: WebSearch, phrasings: list[str], limit: int) -> list[WebResult]:
    """The results of every phrasing, each URL once (its first result), best score first, at most ``limit``."""
    seen: dict[str, WebResult] = {}
    for phrase in phrasings:
        for result in search(phrase):
            seen.setdefault(result.url, result)
    return sorted(seen.values(), key=lambda r: -r.score)[:limit]
