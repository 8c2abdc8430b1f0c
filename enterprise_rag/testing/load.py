"""Concurrent clients against one :class:`EnterpriseRAG`: threads or asyncio, each checking its own results.

Used by the load test and the reliability benchmark with the corpus of
:mod:`enterprise_rag.testing.tenants`: client ``i`` asks team ``i``'s question
as team ``i``'s user, and its result must hold its own code word and nothing
of another team's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llama_index.core.schema import NodeWithScore

from enterprise_rag.schema.result import QueryResult
from enterprise_rag.testing import tenants

if TYPE_CHECKING:
    from enterprise_rag.rag import EnterpriseRAG


@dataclass
class CallResult:
    """One call of one client: how long it took, and what went wrong (nothing, for a good call)."""

    team: int
    op: str
    seconds: float
    error: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.problems


def _check_retrieve(team: int, nodes: list[NodeWithScore]) -> list[str]:
    texts = [n.node.get_content() for n in nodes]
    problems = tenants.cross_talk(team, texts, [n.node.metadata.get("source", "") for n in nodes])
    if not any(tenants.code_word(team) in t for t in texts):
        problems.append("own passage missing")
    return problems


def _check_query(team: int, res: QueryResult) -> list[str]:
    texts = [res.answer, *(c.quote for c in res.citations), *(s["text"] for s in res.sources)]
    problems = tenants.cross_talk(team, texts, [c.source for c in res.citations])
    if tenants.code_word(team) not in res.answer:
        problems.append(f"own answer missing: {res.answer[:80]!r}")
    return problems


def call(rag: EnterpriseRAG, team: int, op: str) -> CallResult:
    t0 = time.perf_counter()
    try:
        if op == "retrieve":
            problems = _check_retrieve(team, rag.retrieve(tenants.question(team), user=tenants.principal(team)))
        else:
            problems = _check_query(team, rag.query(tenants.question(team), user=tenants.principal(team)))
    except Exception as exc:
        return CallResult(team, op, time.perf_counter() - t0, error=f"{type(exc).__name__}: {exc}")
    return CallResult(team, op, time.perf_counter() - t0, problems=problems)


async def acall(rag: EnterpriseRAG, team: int, op: str) -> CallResult:
    t0 = time.perf_counter()
    try:
        if op == "retrieve":
            retriever = rag.as_retriever(tenants.principal(team))
            problems = _check_retrieve(team, await retriever.aretrieve(tenants.question(team)))
        else:
            problems = _check_query(team, await rag.aquery(tenants.question(team), user=tenants.principal(team)))
    except Exception as exc:
        return CallResult(team, op, time.perf_counter() - t0, error=f"{type(exc).__name__}: {exc}")
    return CallResult(team, op, time.perf_counter() - t0, problems=problems)


def run_threads(rag: EnterpriseRAG, clients: int, rounds: int, op: str) -> list[CallResult]:
    """``clients`` threads, each making ``rounds`` calls in a row."""

    def client(team: int) -> list[CallResult]:
        return [call(rag, team, op) for _ in range(rounds)]

    with concurrent.futures.ThreadPoolExecutor(max_workers=clients) as pool:
        return [r for batch in pool.map(client, range(clients)) for r in batch]


def run_asyncio(rag: EnterpriseRAG, clients: int, rounds: int, op: str) -> list[CallResult]:
    """``clients`` coroutines on one event loop, each making ``rounds`` calls in a row."""

    async def client(team: int) -> list[CallResult]:
        return [await acall(rag, team, op) for _ in range(rounds)]

    async def main() -> list[list[CallResult]]:
        return await asyncio.gather(*(client(team) for team in range(clients)))

    return [r for batch in asyncio.run(main()) for r in batch]
