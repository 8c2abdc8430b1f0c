"""Web fallback sources behind one small protocol, and the egress policy that gates them.

Two sources ship:

- :class:`TavilyWebSearch` sends the question to the Tavily API (the question
  **leaves the machine**). Results are limited to the domain allow-list twice:
  by the API's ``include_domains`` and again here, on the result URLs, because
  an API may ignore or loosen a filter.
- :class:`~enterprise_rag.providers.curated_search.CuratedWebSearch` is the enterprise alternative: a local folder of
  vetted ``.md`` / ``.txt`` / ``.html`` documents searched with BM25 over words.
  Nothing leaves the machine, so it needs no egress permission.

:class:`EgressPolicy` says whether a principal may use the configured source:
never when it is disabled; always for a local source; for a source that leaves
the machine only when the principal shares a group with ``egress_groups``
(empty = nobody).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from enterprise_rag.config import normalize_domain
from enterprise_rag.errors import WebSearchError
from enterprise_rag.principal import Principal, require_principal
from enterprise_rag.schema.sources import WebResult

logger = logging.getLogger(__name__)

__all__ = [
    "EgressPolicy",
    "TavilyWebSearch",
    "WebResult",
    "WebSearch",
    "host_allowed",
]


@runtime_checkable
class WebSearch(Protocol):
    """A web fallback source."""

    @property
    def leaves_machine(self) -> bool:
        """True when a search sends the question to a third party (needs egress permission)."""
        ...

    def search(self, query: str, max_results: int | None = None) -> list[WebResult]:
        """Up to ``max_results`` results (None = the source's configured default), best first."""
        ...


def host_allowed(url: str, allowed_domains: Sequence[str]) -> bool:
    """True when ``url`` is http(s) and its host is one of ``allowed_domains`` or a subdomain of one.

    An empty allow-list allows every http(s) URL. ``https://docs.python.org.evil.com`` and
    ``https://docs.python.org@evil.com`` are not ``docs.python.org``.
    """
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").rstrip(".")
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not host:
        return False
    if not allowed_domains:
        return True
    return any(host == d or host.endswith("." + d) for d in allowed_domains)


# --- Tavily ----------------------------------------------------------------------------------------

# tavily-python's own exception classes, by name (the SDK is an optional extra, so it is not imported here).
_TAVILY_ERRORS: dict[str, str] = {
    "InvalidAPIKeyError": "Tavily rejected the API key (HTTP 401); check web_search.api_key or TAVILY_API_KEY",
    "MissingAPIKeyError": "Tavily needs an API key; set web_search.api_key or TAVILY_API_KEY",
    "UsageLimitExceededError": "Tavily usage or rate limit exceeded (HTTP 429); retry later or raise the plan's limit",
    "ForbiddenError": "Tavily refused the request (HTTP 403); the key may not be allowed to search",
    "BadRequestError": "Tavily rejected the request as invalid (HTTP 400)",
    "TimeoutError": "Tavily did not answer in time",
}


class TavilyWebSearch:
    """Web search through the real ``tavily.TavilyClient``, restricted to ``allowed_domains``.

    ``client`` is a ``tavily.TavilyClient`` (built by the provider registry from
    the configured key). Every SDK or HTTP failure becomes :class:`WebSearchError`
    with a message that never contains the API key.
    """

    leaves_machine = True

    def __init__(
        self, client: Any, allowed_domains: Iterable[str] = (), max_results: int = 5, timeout_s: float = 30.0
    ) -> None:
        if not callable(getattr(client, "search", None)):
            raise TypeError("TavilyWebSearch needs a tavily.TavilyClient (an object with a search() method)")
        if max_results < 1:
            raise ValueError("max_results must be at least 1")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.client = client
        self.allowed_domains: tuple[str, ...] = tuple(dict.fromkeys(normalize_domain(d) for d in allowed_domains))
        self.max_results = max_results
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"TavilyWebSearch(allowed_domains={list(self.allowed_domains)!r}, max_results={self.max_results})"

    def search(self, query: str, max_results: int | None = None) -> list[WebResult]:
        if not query or not query.strip():
            return []
        limit = max_results or self.max_results
        try:
            response = self.client.search(
                query,
                max_results=limit,
                include_domains=list(self.allowed_domains) or None,
                search_depth="basic",
                timeout=self.timeout_s,
            )
        except Exception as exc:  # the SDK raises its own classes, requests' and JSON errors
            raise WebSearchError(self._describe(exc)) from exc
        results: list[WebResult] = []
        dropped = 0
        for item in _result_items(response):
            result = _to_result(item)
            if result is None:
                continue
            if not host_allowed(result.url, self.allowed_domains):
                dropped += 1
                continue
            results.append(result)
        if dropped:
            logger.warning("dropped %d Tavily result(s) outside web_search.allowed_domains", dropped)
        results.sort(key=lambda r: r.score, reverse=True)
        return results[:limit]

    def _describe(self, exc: Exception) -> str:
        names = [cls.__name__ for cls in type(exc).__mro__]
        known = next((_TAVILY_ERRORS[n] for n in names if n in _TAVILY_ERRORS), None)
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if known is not None:
            message = known
        elif status is not None:
            message = f"Tavily answered HTTP {status}"
        elif any(n in ("ConnectionError", "Timeout", "RequestException") for n in names):
            message = "could not reach Tavily (network error)"
        else:
            message = f"Tavily search failed ({type(exc).__name__})"
        detail = str(exc).strip()
        if detail and detail not in message:
            message = f"{message}: {detail[:300]}"
        return "web search failed: " + self._scrub(message)

    def _scrub(self, text: str) -> str:
        key = getattr(self.client, "api_key", None)
        if isinstance(key, str) and key:
            text = text.replace(key, "***")
        return re.sub(r"\btvly-[A-Za-z0-9_-]+", "tvly-***", text)


def _result_items(response: Any) -> list[dict[str, Any]]:
    if not isinstance(response, dict):
        raise WebSearchError(f"web search failed: Tavily returned {type(response).__name__}, not a JSON object")
    items = response.get("results") or []
    if not isinstance(items, list):
        raise WebSearchError("web search failed: Tavily's 'results' is not a list")
    return [i for i in items if isinstance(i, dict)]


def _to_result(item: dict[str, Any]) -> WebResult | None:
    url = item.get("url")
    if not isinstance(url, str) or not url.strip():
        return None
    try:
        score = float(item.get("score") or 0.0)
    except (TypeError, ValueError):
        score = 0.0
    published = item.get("published_date")
    return WebResult(
        title=str(item.get("title") or url),
        url=url.strip(),
        content=str(item.get("content") or ""),
        score=score,
        published_date=str(published) if published else None,
    )


# --- egress ----------------------------------------------------------------------------------------


class EgressPolicy:
    """Who may use the configured web fallback.

    - no source (``web_search.provider: disabled``): nobody;
    - a source that does not leave the machine (curated): every principal;
    - a source that leaves the machine (Tavily): only principals sharing a group with
      ``egress_groups``; an empty list means nobody.
    """

    def __init__(self, provider: WebSearch | None, egress_groups: Iterable[str] = ()) -> None:
        self.provider = provider
        self.egress_groups: frozenset[str] = frozenset(g for g in egress_groups if isinstance(g, str) and g)

    @property
    def leaves_machine(self) -> bool:
        """True when the configured source sends questions to a third party."""
        return self.provider is not None and bool(self.provider.leaves_machine)

    def allows(self, principal: Principal) -> bool:
        """May ``principal``'s question go to the web fallback? (No principal is an error, not 'yes'.)"""
        user = require_principal(principal)
        if self.provider is None:
            return False
        if not self.provider.leaves_machine:
            return True
        return bool(self.egress_groups.intersection(user.groups))

    def __repr__(self) -> str:
        return f"EgressPolicy(provider={self.provider!r}, egress_groups={sorted(self.egress_groups)!r})"
