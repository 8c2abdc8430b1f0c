"""Cohere rerank with a request timeout and one retry owner.

The stock ``CohereRerank`` builds its ``ClientV2`` without a timeout (the SDK
then waits up to 300 s) and wraps each call in a tenacity loop (10 attempts by
default, 4-10 s apart) around an SDK that itself retries 429/408/409/5xx twice:
a stalled or failing service held a retrieval for minutes. Here the client has
the configured timeout and only the SDK retries: at most 3 HTTP requests.

The class derives from ``CohereRerank``, which comes with the ``cohere`` extra,
so it is defined on first use by :func:`timed_cohere_rerank_class`: importing
this module needs neither the extra nor the time to load it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from llama_index.core.postprocessor.types import BaseNodePostprocessor

from enterprise_rag.extras import require


def timed_cohere_rerank(**kwargs: Any) -> BaseNodePostprocessor:
    """A ``TimedCohereRerank(**kwargs)``; :class:`MissingExtraError` without the ``cohere`` extra."""
    return timed_cohere_rerank_class()(**kwargs)


@functools.cache
def timed_cohere_rerank_class() -> type[BaseNodePostprocessor]:
    """The ``TimedCohereRerank`` class, defined once, on the first call (imports the ``cohere`` extra)."""
    if TYPE_CHECKING:
        import cohere
        from llama_index.postprocessor.cohere_rerank import CohereRerank
    else:
        cohere = require("cohere", "cohere")
        CohereRerank = require("llama_index.postprocessor.cohere_rerank", "cohere").CohereRerank

    class TimedCohereRerank(CohereRerank):
        """``CohereRerank`` with ``timeout_s`` per request; retries left to the SDK (2 on 429/5xx)."""

        def __init__(
            self, *, model: str, top_n: int, api_key: str, timeout_s: float, base_url: str | None = None
        ) -> None:
            super().__init__(model=model, top_n=top_n, api_key=api_key, base_url=base_url, max_retries=1)  # 1 attempt
            self._client = cohere.ClientV2(api_key=api_key, base_url=base_url, timeout=timeout_s)

        @classmethod
        def class_name(cls) -> str:
            return "TimedCohereRerank"

    TimedCohereRerank.__qualname__ = "TimedCohereRerank"  # pickled by reference: the module attribute below
    return TimedCohereRerank


def __getattr__(name: str) -> Any:
    """``TimedCohereRerank`` as a module attribute, defined on first access."""
    if name == "TimedCohereRerank":
        return timed_cohere_rerank_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
