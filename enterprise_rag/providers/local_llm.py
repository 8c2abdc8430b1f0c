"""The local LLM: a GGUF model run in-process by xllamacpp (llama.cpp's server core).

One engine per model file is shared by every role in the process (the model
takes ~2 GB of RAM); it generates in one worker thread of its own, for every call
and every stream. Requests are OpenAI-style dicts, so ``response_format`` with a
JSON schema becomes a grammar and the output is schema-constrained.

The engine stops a generation at the first line end past ``timeout_s``
(llama.cpp's ``t_max_predict_ms``); such a reply, cut before its token budget,
is raised as :class:`~enterprise_rag.errors.LLMTimeoutError`, never returned.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from pydantic import Field

from enterprise_rag.errors import LLMError, LLMTimeoutError
from enterprise_rag.extras import require

logger = logging.getLogger(__name__)


def usable_cpus() -> int:
    """The cores this process may run on (its CPU affinity: a container or ``taskset`` limit), not the
    machine's count, which oversubscribes a limited process."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity API on this platform
        return os.cpu_count() or 2


class _EngineThread:
    """One daemon thread that runs submitted calls in order (a process exiting mid-generation is not held up,
    as it would be by a thread pool's worker)."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]] = (
            queue.Queue()
        )
        threading.Thread(target=self._run, name="local-llm", daemon=True).start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((future, fn, args))
        return future

    def _run(self) -> None:
        while True:
            future, fn, args = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # the caller's future raises it
                    future.set_exception(exc)


class _Engine:
    """One loaded model and the one thread that runs it: calls are serialised (one slot, 2 cores)."""

    def __init__(self, path: Path, context_window: int, threads: int | None) -> None:
        xllamacpp = require("xllamacpp", "local")
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = context_window
        params.n_parallel = 1
        params.cpuparams.n_threads = threads or usable_cpus()
        params.cpuparams_batch.n_threads = threads or usable_cpus()
        params.cache_prompt = True
        params.verbosity = -1
        params.warmup = False
        self._server = xllamacpp.Server(params)
        self._worker = _EngineThread()

    def chat(self, request: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._worker.submit(self._server.handle_chat_completions, request).result()
        return result

    def chat_stream(
        self, request: dict[str, Any], on_chunk: Callable[[dict[str, Any]], None]
    ) -> concurrent.futures.Future[None]:
        """``request`` with ``stream``, queued on the engine's thread: each OpenAI-style chunk goes to
        ``on_chunk`` as it is generated; the future ends with the generation."""
        return self._worker.submit(self._server.handle_chat_completions, {**request, "stream": True}, on_chunk)


_ENGINES: dict[tuple[str, int, int | None], _Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _check_complete(choice: dict[str, Any], timings: dict[str, Any], request: dict[str, Any]) -> None:
    """Raise when the engine stopped the reply at its time limit: "length" before the token budget, once the
    generation had run for the limit (a full context window also ends in "length", sooner)."""
    completion_tokens = int(timings.get("predicted_n", 0))
    if (choice.get("finish_reason") == "length" and completion_tokens < int(request["max_tokens"])
            and float(timings.get("predicted_ms", 0.0)) >= request["t_max_predict_ms"]):  # fmt: skip
        raise LLMTimeoutError(
            f"local LLM ran out of time: stopped after {completion_tokens} of {request['max_tokens']} tokens"
            f" at the {request['t_max_predict_ms'] / 1000:g} s limit"
        )


def _engine(path: Path, context_window: int, threads: int | None) -> _Engine:
    key = (str(path), context_window, threads)
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            logger.info("loading local LLM %s", path.name)
            _ENGINES[key] = _Engine(path, context_window, threads)
        return _ENGINES[key]


class LocalLlamaLLM(CustomLLM):
    """A LlamaIndex LLM over the in-process llama.cpp engine.

    ``chat(messages, response_format={...})`` passes an OpenAI-style
    ``response_format`` through, and ``logprobs=True, top_logprobs=n`` ask for
    the alternatives of each generated token (in ``response.raw["choices"][0]["logprobs"]``);
    ``ignore_eos=True`` generates ``max_tokens`` tokens whatever the model would end on; token usage
    is in ``response.raw["usage"]``, also in the last response of ``stream_chat``.
    """

    streams_usage: ClassVar[bool] = True  # stream_chat's last response carries the token usage

    model_path: Path = Field(description="GGUF file.")
    model_name: str = Field(default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    context_window: int = Field(default=8192)
    max_tokens: int = Field(default=512)
    temperature: float = Field(default=0.0)
    timeout_s: float = Field(default=180.0)
    threads: int | None = Field(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "LocalLlamaLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self.context_window,
            num_output=self.max_tokens,
            is_chat_model=True,
            model_name=self.model_name,
        )

    def _request(self, messages: Sequence[ChatMessage], **kwargs: Any) -> dict[str, Any]:
        request: dict[str, Any] = {
            "messages": [{"role": m.role.value, "content": m.content or ""} for m in messages],
            "max_tokens": kwargs.get("max_tokens", self.max_tokens),
            "temperature": kwargs.get("temperature", self.temperature),
            "t_max_predict_ms": int(kwargs.get("timeout_s", self.timeout_s) * 1000),
            "seed": 0,
        }
        if kwargs.get("response_format") is not None:
            request["response_format"] = kwargs["response_format"]
        if kwargs.get("ignore_eos"):  # exactly max_tokens tokens: benchmarks time a fixed answer length
            request["ignore_eos"] = True
        if kwargs.get("logprobs"):  # OpenAI-style: choices[0].logprobs.content[i].top_logprobs in the result
            request["logprobs"] = True
            request["top_logprobs"] = int(kwargs.get("top_logprobs") or 1)
        return request

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        engine = _engine(self.model_path, self.context_window, self.threads)
        request = self._request(messages, **kwargs)
        result = engine.chat(request)
        if "error" in result or not result.get("choices"):
            raise LLMError(f"local LLM failed: {result.get('error', result)}")
        _check_complete(result["choices"][0], result.get("timings") or {}, request)
        content = result["choices"][0]["message"].get("content") or ""
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=content), raw=result)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """The reply as it is generated, handed over chunk by chunk from the engine's thread."""
        engine = _engine(self.model_path, self.context_window, self.threads)
        request = self._request(messages, **kwargs)
        chunks: queue.Queue[dict[str, Any] | BaseException | None] = queue.Queue()
        done = engine.chat_stream(request, chunks.put)

        def ended(future: concurrent.futures.Future[None]) -> None:
            exc = future.exception()
            if exc is not None:  # handed to the reader, which raises it
                chunks.put(exc)
            chunks.put(None)

        done.add_done_callback(ended)

        def gen() -> ChatResponseGen:
            text = ""
            timings: dict[str, Any] = {}
            last: dict[str, Any] = {}
            while (chunk := chunks.get()) is not None:
                if isinstance(chunk, BaseException) or "error" in chunk:
                    raise LLMError(f"local LLM failed: {chunk}")
                timings = chunk.get("timings", timings)
                choices = chunk.get("choices") or [{}]
                last = choices[0]
                delta = (choices[0].get("delta") or {}).get("content") or ""
                text += delta
                if delta:
                    yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=delta)
            _check_complete(last, timings, request)
            reused, evaluated = int(timings.get("cache_n", 0)), int(timings.get("prompt_n", 0))
            usage = {
                "prompt_tokens": reused + evaluated,
                "completion_tokens": int(timings.get("predicted_n", 0)),
                "prompt_tokens_details": {"cached_tokens": reused},
            }
            yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta="",
                               raw={"usage": usage})  # fmt: skip

        return gen()

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        response = self.chat([ChatMessage(role=MessageRole.USER, content=prompt)], **kwargs)
        return CompletionResponse(text=response.message.content or "", raw=response.raw)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        response = self.complete(prompt, formatted=formatted, **kwargs)

        def gen() -> CompletionResponseGen:
            yield CompletionResponse(text=response.text, delta=response.text, raw=response.raw)

        return gen()
