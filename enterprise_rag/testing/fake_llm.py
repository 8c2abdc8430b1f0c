"""A scripted LlamaIndex LLM for workflow tests.

Each call is routed to a handler by its task name: the ``json_schema`` name of
the response format, else the ``Task: <name>`` header every prompt starts
with. A handler returns the reply text (or JSON-able data), or raises to
simulate a failure (timeout, rate limit). Calls are recorded.

A call made with ``logprobs=True`` (a yes/no probability) gets the alternatives
of its first token in ``response.raw`` as the local engine returns them
(``choices[0]["logprobs"]["content"][0]["top_logprobs"]``): a handler returns
:class:`TokenProbabilities` (e.g. :func:`yes_probability`), or text, which is
then the one certain token.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
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
from pydantic import PrivateAttr

from enterprise_rag.llm.prompts import ADDRESSEES, screened_paragraph

Handler = Callable[[list[ChatMessage], dict[str, Any]], Any]


class TokenProbabilities(dict[str, float]):
    """A handler's reply to a logprobs call: the first token's alternatives and their probabilities."""


def yes_probability(p: float) -> TokenProbabilities:
    """The reply of a model whose first token is "yes" with probability ``p`` and "no" otherwise."""
    return TokenProbabilities({"yes": p, "no": 1.0 - p})


def _asks_if_written_to_the_model(messages: Sequence[ChatMessage]) -> bool:
    return ADDRESSEES["model"] in (messages[-1].content or "")


def written_for_readers(messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> TokenProbabilities:
    """An ``addressee`` handler for text written for its readers: "no" to "written to an AI model", "yes" to
    "written for its readers" (see :mod:`enterprise_rag.answer.checks.addressee`)."""
    return yes_probability(0.0 if _asks_if_written_to_the_model(messages) else 1.0)


def written_to_the_model_if(keyword: str) -> Handler:
    """An ``addressee`` handler that takes paragraphs containing ``keyword`` as written to an AI model, and every
    other paragraph as :func:`written_for_readers`."""

    def handler(messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> TokenProbabilities:
        if keyword.lower() in screened_paragraph(list(messages)).lower():
            return yes_probability(1.0 if _asks_if_written_to_the_model(messages) else 0.0)
        return written_for_readers(messages, kwargs)

    return handler


def logprobs_raw(tokens: dict[str, float]) -> dict[str, Any]:
    """``choices`` in the local engine's shape for one generated token (impossible tokens left out)."""
    ranked = sorted(((t, p) for t, p in tokens.items() if p > 0), key=lambda tp: -tp[1])
    top = [{"token": t, "logprob": math.log(p)} for t, p in ranked]
    first = ranked[0][0] if ranked else ""
    entry = {**top[0], "top_logprobs": top} if top else {"token": "", "logprob": 0.0, "top_logprobs": []}
    return {"choices": [{"message": {"role": "assistant", "content": first}, "logprobs": {"content": [entry]}}]}


_TASK = re.compile(r"^Task: ([\w-]+)", re.M)


def task_name(messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> str:
    fmt = kwargs.get("response_format") or {}
    if fmt.get("json_schema", {}).get("name"):
        return str(fmt["json_schema"]["name"])
    for message in reversed(messages):
        match = _TASK.search(message.content or "")
        if match:
            return match.group(1)
    return "text"


class ScriptedLLM(CustomLLM):
    """``ScriptedLLM({"grade": lambda msgs, kw: yes_probability(0.9), "generate": "answer [S1]"})``."""

    model_name: str = "scripted"
    streams_usage: ClassVar[bool] = True  # stream_chat's last response carries the usage, like the local engine
    _handlers: dict[str, Any] = PrivateAttr(default_factory=dict)
    calls: list[tuple[str, list[ChatMessage]]] = []

    def __init__(self, handlers: dict[str, Any], model_name: str = "scripted") -> None:
        super().__init__(model_name=model_name)
        self._handlers = dict(handlers)
        self.calls = []

    @classmethod
    def class_name(cls) -> str:
        return "ScriptedLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model_name, is_chat_model=True)

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        name = task_name(messages, kwargs)
        self.calls.append((name, list(messages)))
        if name not in self._handlers:
            raise KeyError(f"ScriptedLLM has no handler for task {name!r}")
        handler = self._handlers[name]
        reply = handler(list(messages), kwargs) if callable(handler) else handler
        prompt = sum(len((m.content or "").split()) for m in messages)
        if kwargs.get("logprobs"):
            raw = logprobs_raw(reply if isinstance(reply, TokenProbabilities) else {str(reply): 1.0})
            text = raw["choices"][0]["message"]["content"]
            raw["usage"] = {"prompt_tokens": prompt, "completion_tokens": 1}
            return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), raw=raw)
        text = reply if isinstance(reply, str) else json.dumps(reply)
        usage = {"prompt_tokens": prompt, "completion_tokens": len(text.split())}
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), raw={"usage": usage})

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """The scripted reply word by word, then a last response with the usage (as the local engine streams)."""
        response = self.chat(messages, **kwargs)
        text = response.message.content or ""

        def gen() -> ChatResponseGen:
            pieces = re.findall(r"\S+\s*", text)
            for i in range(len(pieces)):
                so_far = "".join(pieces[: i + 1])
                yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=so_far), delta=pieces[i])
            yield ChatResponse(message=response.message, delta="", raw=response.raw)

        return gen()

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        response = self.chat([ChatMessage(role=MessageRole.USER, content=prompt)], **kwargs)
        return CompletionResponse(text=response.message.content or "", raw=response.raw)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        response = self.complete(prompt, formatted, **kwargs)

        def gen() -> CompletionResponseGen:
            yield response

        return gen()
