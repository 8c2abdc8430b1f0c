"""One error hierarchy for everything the package raises on purpose.

Callers catch :class:`RagError`; driver and SDK errors are wrapped in one of
these with a message that says what to do next.
"""

from __future__ import annotations


class RagError(Exception):
    """Base class of every error raised by enterprise_rag."""


class ConfigError(RagError):
    """The configuration is invalid; the message names the field."""


class MissingExtraError(RagError, ImportError):
    """An optional dependency is not installed; the message says which extra to install."""


class StoreError(RagError):
    """The database could not be reached, started or migrated."""


class ModelError(RagError):
    """A local model file is missing, incomplete or does not match its pinned hash."""


class PermissionDeniedError(RagError):
    """A request came without a usable principal (retrieval never defaults to 'everything')."""


class IngestError(RagError):
    """A single document could not be ingested; carries its path and the reason."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class LLMError(RagError):
    """An LLM call failed after its retries (timeout, rate limit, server error, malformed output)."""


class LLMUnavailableError(LLMError):
    """The LLM service failed after its client's own HTTP retries; callers do not retry it again."""


class WebSearchError(RagError):
    """A web search call failed (bad key, quota, timeout, unreachable service); never carries the API key."""


class NotYetAvailableError(RagError, NotImplementedError):
    """A public method whose implementation has not landed yet."""
