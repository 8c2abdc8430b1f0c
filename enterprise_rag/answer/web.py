"""The web fallback's inputs: extra phrasings of the query, and the results of all phrasings merged."""

from __future__ import annotations

from collections.abc import Callable

from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.llm.prompts import rewrite_messages
from enterprise_rag.schema.sources import WebResult

WebSearch = Callable[[str], list[WebResult]]
"""Results for one query from the configured web source (none when it is disabled); raises WebSearchError."""


def more_phrasings(caller: LLMCaller, query: str, n: int) -> list[str]:
    """Up to ``n`` new phrasings of ``query``, each asked to differ from the query and those before it."""
    phrasings: list[str] = []
    for _ in range(n):
        reply = caller.call("grader", "rewrite", rewrite_messages(query, [query, *phrasings]), max_tokens=64)
        line = next((ln.strip().strip('"') for ln in str(reply).splitlines() if ln.strip()), "")
        if line and line not in phrasings:
            phrasings.append(line)
    return phrasings


def search_all(search: WebSearch, phrasings: list[str], limit: int) -> list[WebResult]:
    """The results of every phrasing, each URL once (its first result), best score first, at most ``limit``."""
    seen: dict[str, WebResult] = {}
    for phrase in phrasings:
        for result in search(phrase):
            seen.setdefault(result.url, result)
    return sorted(seen.values(), key=lambda r: -r.score)[:limit]
