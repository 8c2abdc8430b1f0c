"""llama-index's OpenAI-compatible LLM with one retry owner, so the HTTP attempts equal the configured bound.

It derives from ``OpenAILike``, not ``OpenAI``: the stock ``OpenAI`` looks the model name up
in a table of OpenAI models and raises "Unknown model" for any other, so an ``api_base`` that
points at vLLM, Ollama, llama.cpp or a gateway (``llama3.1:8b``, ``Qwen/Qwen2.5-7B-Instruct``)
failed every call. The context window and chat mode come from configuration instead.

Stock ``OpenAI(max_retries=n)`` retries twice over: a tenacity loop of ``n``
attempts around the openai SDK, whose client retries ``n`` more times per
attempt (measured: 6 HTTP requests for ``max_retries=2``). Here the wrapper's
loop is off and only the SDK retries (429, 5xx, timeouts, refused connections,
with its exponential backoff and ``retry-after``): ``max_retries + 1`` requests.
What still fails is raised as :class:`LLMUnavailableError`, which the
workflow's own retry loop does not multiply again.

Stock also lets the instance's ``max_tokens`` override a per-call ``max_tokens``;
here the call's budget wins, as it does for the local model.

The class derives from llama-index's ``OpenAILike``, which comes with the ``openai``
extra (and takes most of a second to import), so it is defined on first use by
:func:`bounded_retry_openai_class`: importing this module needs neither.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse
from llama_index.core.bridge.pydantic import Field
from llama_index.core.llms import LLM

from enterprise_rag.errors import LLMUnavailableError
from enterprise_rag.extras import require


def bounded_retry_openai(**kwargs: Any) -> LLM:
    """A ``BoundedRetryOpenAI(**kwargs)``; :class:`MissingExtraError` without the ``openai`` extra."""
    return bounded_retry_openai_class()(**kwargs)


DEFAULT_CONTEXT_WINDOW = 8192


def openai_context_window(model: str) -> int:
    """OpenAI's context window for one of its model names; :data:`DEFAULT_CONTEXT_WINDOW` for any other."""
    utils = require("llama_index.llms.openai.utils", "openai")
    try:
        return int(utils.openai_modelname_to_contextsize(model))
    except ValueError:
        return DEFAULT_CONTEXT_WINDOW


@functools.cache
def bounded_retry_openai_class() -> type[LLM]:
    """The ``BoundedRetryOpenAI`` class, defined once, on the first call (imports the ``openai`` extra)."""
    if TYPE_CHECKING:
        import openai
        from llama_index.llms.openai_like import OpenAILike
    else:
        openai = require("openai", "openai")
        OpenAILike = require("llama_index.llms.openai_like", "openai").OpenAILike

    class BoundedRetryOpenAI(OpenAILike):
        """``OpenAI`` whose SDK client retries ``http_max_retries`` times and whose wrapper never retries."""

        http_max_retries: int = Field(default=2, ge=0, description="Retries of one call by the openai SDK.")

        def __init__(self, *, http_max_retries: int = 2, **kwargs: Any) -> None:
            super().__init__(max_retries=0, http_max_retries=http_max_retries, **kwargs)  # 0: wrapper loop off

        @classmethod
        def class_name(cls) -> str:
            return "BoundedRetryOpenAI"

        def _get_credential_kwargs(self, is_async: bool = False) -> dict[str, Any]:
            return {**super()._get_credential_kwargs(is_async), "max_retries": self.http_max_retries}

        def _get_model_kwargs(self, **kwargs: Any) -> dict[str, Any]:
            model_kwargs = super()._get_model_kwargs(**kwargs)
            if "max_tokens" in kwargs:
                key = "max_completion_tokens" if "max_completion_tokens" in model_kwargs else "max_tokens"
                model_kwargs[key] = kwargs["max_tokens"]
            return model_kwargs

        def _unavailable(self, exc: openai.APIError) -> LLMUnavailableError:
            return LLMUnavailableError(
                f"OpenAI {self.model} failed after {self.http_max_retries + 1} HTTP attempts: "
                f"{type(exc).__name__}: {exc}"
            )

        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            try:
                return super().chat(messages, **kwargs)
            except openai.APIError as exc:
                raise self._unavailable(exc) from exc

        async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            try:
                return await super().achat(messages, **kwargs)
            except openai.APIError as exc:
                raise self._unavailable(exc) from exc

        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            try:
                return super().complete(prompt, formatted, **kwargs)
            except openai.APIError as exc:
                raise self._unavailable(exc) from exc

        async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            try:
                return await super().acomplete(prompt, formatted, **kwargs)
            except openai.APIError as exc:
                raise self._unavailable(exc) from exc

    BoundedRetryOpenAI.__qualname__ = "BoundedRetryOpenAI"  # pickled by reference: the module attribute below
    return BoundedRetryOpenAI


def __getattr__(name: str) -> Any:
    """``BoundedRetryOpenAI`` as a module attribute, defined on first access."""
    if name == "BoundedRetryOpenAI":
        return bounded_retry_openai_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
