"""Streaming a query: the events it yields, and their bridge to sync code."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class StreamEvent:
    """One event of a streamed query.

    ``started`` (a step's name, as it begins), ``step`` (a finished step: its name, trace data and
    ``seconds``), ``draft`` (the next piece of a draft as the generator writes it: unchecked, and a revision
    starts a new one), ``answer`` (a piece of the checked answer) or ``result`` (the QueryResult).
    """

    kind: Literal["started", "step", "draft", "answer", "result"]
    name: str = ""
    text: str = ""
    data: Any = field(default=None)
    seconds: float = 0.0


def iterate_sync(stream: AsyncGenerator[T, None]) -> Iterator[T]:
    """Iterate ``stream`` from sync code on a private event loop, which runs in this thread, or in a worker
    thread when this one already runs a loop (Jupyter). Leaving early closes ``stream``."""
    try:
        asyncio.get_running_loop()
        threaded = True
    except RuntimeError:
        threaded = False
    runner = asyncio.Runner()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:

        def call(fn: Callable[..., Any], *args: Any) -> Any:
            return pool.submit(fn, *args).result() if threaded else fn(*args)

        async def next_item() -> T:
            return await anext(stream)

        async def close() -> None:
            await stream.aclose()

        try:
            while True:
                try:
                    item = call(runner.run, next_item())
                except StopAsyncIteration:
                    return
                yield item
        finally:
            try:
                call(runner.run, close())
            finally:
                call(runner.close)
