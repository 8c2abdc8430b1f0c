"""A scripted LlamaIndex LLM for workflow tests.

Each call is routed to a handler by its task name: the ``json_schema`` name of
the response format, else the ``Task: <name>`` header every prompt starts
with. A handler returns the reply text (or JSON-able data), or raises to
simulate a failure (timeout, rate limit). Calls are recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from pydantic import PrivateAttr

Handler = Callable[[list[ChatMessage], dict[str, Any]], Any]
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
    """``ScriptedLLM({"grade": lambda msgs, kw: {...}, "generate": "answer [S1]"})``."""

    model_name: str = "scripted"
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
        text = reply if isinstance(reply, str) else json.dumps(reply)
        prompt = sum(len((m.content or "").split()) for m in messages)
        usage = {"prompt_tokens": prompt, "completion_tokens": len(text.split())}
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), raw={"usage": usage})

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
