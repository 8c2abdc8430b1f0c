"""Every LLM call of a query goes through here: timeout, bounded retries with
backoff, schema-constrained JSON or a one-token yes/no probability read from
logprobs, token accounting, and trace replay.

Failure policy is the caller's: this raises :class:`LLMError` after the last
retry and the workflow decides (fail-open for grading, fail-closed for support).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.llms import LLM, ChatMessage

from enterprise_rag.errors import LLMError, LLMUnavailableError, brief
from enterprise_rag.llm.untrusted import without_block_ids
from enterprise_rag.store.traces import TraceRecorder

logger = logging.getLogger(__name__)


@dataclass
class CallStats:
    """Counts for the pipeline payload."""

    calls: int = 0
    replayed: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # of the prompt tokens, those the server reused from its prompt cache
    completion_tokens: int = 0
    by_name: dict[str, int] = field(default_factory=dict)


def _field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a dict (the local engine's response), ``obj.name`` of an object (the OpenAI SDK's)."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _usage(raw: Any) -> tuple[int, int, int]:
    """(prompt, cached, completion) token counts of a local (dict) or OpenAI (object) raw response; cached:
    the prompt tokens the server reused from its prompt cache (``usage.prompt_tokens_details.cached_tokens``,
    which llama.cpp fills from its slot cache and OpenAI from its own)."""
    usage = _field(raw, "usage") if raw is not None else None
    if usage is None:
        return 0, 0, 0
    details = _field(usage, "prompt_tokens_details")
    cached = _field(details, "cached_tokens") if details is not None else None
    return int(_field(usage, "prompt_tokens") or 0), int(cached or 0), int(_field(usage, "completion_tokens") or 0)


def top_logprobs_of(raw: Any) -> list[tuple[str, float]] | None:
    """The (token, log-probability) alternatives of a response's first generated token, most likely first.

    Reads the OpenAI shape ``choices[0].logprobs.content[0].top_logprobs``, which the local engine returns as
    dicts and the OpenAI SDK as objects; None when the response carries no logprobs.
    """
    choices = _field(raw, "choices") if raw is not None else None
    if not choices:
        return None
    logprobs = _field(choices[0], "logprobs")
    content = _field(logprobs, "content") if logprobs is not None else None
    if not content:
        return None
    top = _field(content[0], "top_logprobs") or []
    return [(str(_field(t, "token")), float(_field(t, "logprob"))) for t in top]


def option_shares(top: list[tuple[str, float]], options: list[str]) -> dict[str, float] | None:
    """Each option's share of the probability mass of the tokens that read as one of ``options`` (stripped,
    lower-cased, and without brackets); None when none of them is among ``top``."""
    wanted = {o.lower(): o for o in options}
    mass = dict.fromkeys(options, 0.0)
    for token, logprob in top:
        word = token.strip().strip("[]()").lower()
        if word in wanted:
            mass[wanted[word]] += math.exp(logprob)
    total = sum(mass.values())
    return {o: m / total for o, m in mass.items()} if total > 0 else None


def yes_share(top: list[tuple[str, float]]) -> float | None:
    """p(yes) / (p(yes) + p(no)) over the tokens that read "yes" / "no" stripped and lower-cased;
    None when neither is among them."""
    shares = option_shares(top, ["yes", "no"])
    return None if shares is None else shares["yes"]


def check_schema(value: Any, schema: dict[str, Any], path: str = "$") -> None:
    """A small JSON-schema subset check (type, required, enum, items, properties): grammars can still truncate."""
    kind = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}
    if kind in types and not isinstance(value, types[kind]):  # type: ignore[arg-type]
        raise ValueError(f"{path}: expected {kind}")
    if "enum" in schema and value not in schema["enum"]:
        raise ValueError(f"{path}: {value!r} not in {schema['enum']}")
    if kind == "object":
        for key in schema.get("required", []):
            if key not in value:
                raise ValueError(f"{path}: missing {key}")
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                check_schema(value[key], sub, f"{path}.{key}")
    if kind == "array":
        for i, item in enumerate(value):
            check_schema(item, schema.get("items", {}), f"{path}[{i}]")


class UnparsableJSONError(ValueError):
    """A structured reply that is not JSON at all (usually truncated), as opposed to JSON off the schema."""


class LLMCaller:
    """Calls the generator / grader roles for one query and accounts for them."""

    def __init__(
        self,
        llms: dict[str, LLM],
        recorder: TraceRecorder | None = None,
        *,
        timeout_s: float = 180.0,
        max_retries: int = 2,
        backoff_s: float = 1.0,
    ) -> None:
        self._llms = llms
        self._recorder = recorder
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self.stats = CallStats()

    def model_id(self, role: str) -> str:
        return self._llms[role].metadata.model_name

    def call(
        self,
        role: str,
        name: str,
        messages: list[ChatMessage],
        *,
        max_tokens: int,
        schema: dict[str, Any] | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Any:
        """Run one call; returns text, or the parsed JSON object when ``schema`` is given.

        With ``on_text``, a model whose streamed replies carry their token usage (``streams_usage``) streams
        and each new piece of text goes to ``on_text`` as it is generated (a retried call starts again).
        """
        kwargs: dict[str, Any] = {"max_tokens": max_tokens}
        streamed = on_text if getattr(self._llms[role], "streams_usage", False) else None
        if schema is not None:
            kwargs["response_format"] = {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}

        def read(response: Any) -> tuple[str, Any]:
            text = response.message.content or ""
            return text, self._parse(text, schema)

        return self._run(
            role,
            name,
            messages,
            kwargs,
            [schema, max_tokens],
            read,
            lambda text: self._parse(text, schema),
            on_text=streamed,
        )

    def yes_probability(
        self, role: str, name: str, messages: list[ChatMessage], *, top_logprobs: int = 10
    ) -> float | None:
        """The model's probability that its one-token reply is "yes" rather than "no", or None when neither
        word is among its ``top_logprobs`` most likely first tokens (or the model returns no logprobs).

        The probability mass of the tokens that read "yes" once stripped and lower-cased (``Yes``, `` yes``,
        ``YES``...), over that of "yes" and "no" together (:meth:`choice`)."""
        shares = self.choice(role, name, messages, ["yes", "no"], top_logprobs=top_logprobs)
        return None if shares is None else shares["yes"]

    def choice(
        self, role: str, name: str, messages: list[ChatMessage], options: list[str], *, top_logprobs: int = 10
    ) -> dict[str, float] | None:
        """The model's probability of each of ``options`` (one-token words, such as letters) as its one-token
        reply, over the options alone; None when none is among its ``top_logprobs`` most likely first tokens
        (or the model returns no logprobs).

        One completion token with logprobs (the local engine and OpenAI both return them). Retries, timeout,
        token accounting and trace replay are those of :meth:`call`; the trace records the top tokens and
        their log-probabilities.
        """
        kwargs: dict[str, Any] = {"max_tokens": 1, "logprobs": True, "top_logprobs": top_logprobs}

        def read(response: Any) -> tuple[str, dict[str, float] | None]:
            top = top_logprobs_of(response.raw)
            if top is None:
                logger.warning("LLM call %s: the model returned no logprobs", name)
                top = []
            return json.dumps({"top_logprobs": top}), option_shares(top, options)

        def replay(text: str) -> dict[str, float] | None:
            return option_shares([(str(t), float(lp)) for t, lp in json.loads(text)["top_logprobs"]], options)

        key = ["yes_probability", top_logprobs] if options == ["yes", "no"] else ["choice", options, top_logprobs]
        return self._run(role, name, messages, kwargs, key, read, replay)  # type: ignore[no-any-return]

    def _run(
        self,
        role: str,
        name: str,
        messages: list[ChatMessage],
        kwargs: dict[str, Any],
        key_parts: list[Any],
        read: Callable[[Any], tuple[str, Any]],
        replay: Callable[[str], Any],
        on_text: Callable[[str], None] | None = None,
    ) -> Any:
        """One call with timeout, bounded retries and backoff, token accounting and trace record / replay.

        ``read`` turns a response into (the text the trace records, the value returned); ``replay`` turns a
        recorded text back into that value. ``key_parts`` (with role, name and messages) key the recording; the
        messages without their data block ids, which change with the process (a resumed run is another one).
        """
        llm = self._llms[role]
        payload = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        keyed = [{**m, "content": without_block_ids(m["content"])} for m in payload]
        key = hashlib.sha256(json.dumps([role, name, keyed, *key_parts], sort_keys=True).encode()).hexdigest()
        self.stats.by_name[name] = self.stats.by_name.get(name, 0) + 1
        recorded = self._recorder.replayed(key) if self._recorder else None
        if recorded is not None:
            self.stats.replayed += 1
            return replay(recorded["response"])
        last: Exception | None = None
        for attempt in range(self._max_retries + 1):
            if attempt:
                time.sleep(self._backoff_s * 2 ** (attempt - 1))
            t0 = time.perf_counter()
            try:
                response = self._with_timeout(llm, messages, kwargs, on_text)
                text, value = read(response)
            except UnparsableJSONError as exc:
                # A schema-constrained reply that does not parse was cut off by the token budget:
                # the same budget would cut it off again.
                last = exc
                self.stats.failures += 1
                kwargs["max_tokens"] *= 2
                logger.warning("LLM call %s attempt %d failed (budget now %d): %s", name, attempt + 1,
                               kwargs["max_tokens"], brief(exc))  # fmt: skip
                logger.debug("LLM call %s attempt %d: %s", name, attempt + 1, exc)
                continue
            except LLMUnavailableError as exc:  # the client already spent its retries: do not multiply them
                self.stats.failures += 1
                raise LLMError(f"LLM call '{name}' failed: {exc}") from exc
            except Exception as exc:  # timeout, HTTP 429/500, malformed JSON: retry, bounded
                last = exc
                self.stats.failures += 1
                logger.warning("LLM call %s attempt %d failed: %s", name, attempt + 1, brief(exc))
                logger.debug("LLM call %s attempt %d: %s", name, attempt + 1, exc)
                continue
            ms = (time.perf_counter() - t0) * 1000
            prompt_tokens, cached_tokens, completion_tokens = _usage(response.raw)
            self.stats.calls += 1
            self.stats.prompt_tokens += prompt_tokens
            self.stats.cached_tokens += cached_tokens
            self.stats.completion_tokens += completion_tokens
            if self._recorder:
                self._recorder.call({
                    "key": key, "name": name, "role": role, "model": llm.metadata.model_name, "messages": payload,
                    "response": text, "prompt_tokens": prompt_tokens, "cached_tokens": cached_tokens,
                    "completion_tokens": completion_tokens, "ms": ms,
                })  # fmt: skip
            return value
        raise LLMError(f"LLM call '{name}' failed after {self._max_retries + 1} attempts: {last}") from last

    async def acall(self, role: str, name: str, messages: list[ChatMessage], **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.call, role, name, messages, **kwargs)

    def _with_timeout(
        self, llm: LLM, messages: list[ChatMessage], kwargs: dict[str, Any], on_text: Callable[[str], None] | None
    ) -> Any:
        def streamed() -> Any:
            last = None
            for last in llm.stream_chat(messages, **kwargs):
                if last.delta and on_text is not None:
                    on_text(last.delta)
            return last

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            future = pool.submit(streamed) if on_text is not None else pool.submit(llm.chat, messages, **kwargs)
            return future.result(timeout=self._timeout_s)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"no answer within {self._timeout_s:g} s") from None
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _parse(text: str, schema: dict[str, Any] | None) -> Any:
        if schema is None:
            return text
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UnparsableJSONError(f"malformed JSON from the model: {exc}") from None
        check_schema(value, schema)
        return value
