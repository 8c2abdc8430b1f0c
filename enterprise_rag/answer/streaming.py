"""Streaming a query: step progress as it happens, then the checked answer."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from enterprise_rag.answer.checks.citations import split_sentences
from enterprise_rag.principal import Principal
from enterprise_rag.schema.sources import History

if TYPE_CHECKING:
    from enterprise_rag.rag import EnterpriseRAG

_DONE = object()


@dataclass(frozen=True)
class StreamEvent:
    """``step`` (name + trace data), ``answer`` (a piece of the checked answer) or ``result`` (the QueryResult)."""

    kind: Literal["step", "answer", "result"]
    name: str = ""
    text: str = ""
    data: Any = field(default=None)


def stream_query(rag: EnterpriseRAG, question: str, user: Principal, history: History | None) -> Iterator[StreamEvent]:
    from enterprise_rag.answer.runner import run_query, run_sync

    events: queue.Queue[Any] = queue.Queue()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = run_sync(
                run_query(rag, question, user, history, on_step=lambda name, data: events.put((name, data)))
            )
        except BaseException as exc:  # re-raised in the consumer's thread
            outcome["error"] = exc
        finally:
            events.put(_DONE)

    threading.Thread(target=work, name="enterprise-rag-stream", daemon=True).start()
    while (item := events.get()) is not _DONE:
        name, data = item
        yield StreamEvent("step", name=name, data=data)
    if "error" in outcome:
        raise outcome["error"]
    result = outcome["result"]
    for sentence in split_sentences(result.answer) or [result.answer]:
        yield StreamEvent("answer", text=sentence)
    yield StreamEvent("result", data=result)
