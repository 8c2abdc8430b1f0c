"""Cohere rerank with a request timeout and one retry owner.

The stock ``CohereRerank`` builds its ``ClientV2`` without a timeout (the SDK
then waits up to 300 s) and wraps each call in a tenacity loop (10 attempts by
default, 4-10 s apart) around an SDK that itself retries 429/408/409/5xx twice:
a stalled or failing service held a retrieval for minutes. Here the client has
the configured timeout and only the SDK retries: at most 3 HTTP requests.
"""

from __future__ import annotations

import cohere
from llama_index.postprocessor.cohere_rerank import CohereRerank


class TimedCohereRerank(CohereRerank):
    """``CohereRerank`` with ``timeout_s`` per request; retries left to the SDK (2 on 429/5xx)."""

    def __init__(self, *, model: str, top_n: int, api_key: str, timeout_s: float, base_url: str | None = None) -> None:
        super().__init__(model=model, top_n=top_n, api_key=api_key, base_url=base_url, max_retries=1)  # 1 attempt
        self._client = cohere.ClientV2(api_key=api_key, base_url=base_url, timeout=timeout_s)

    @classmethod
    def class_name(cls) -> str:
        return "TimedCohereRerank"
