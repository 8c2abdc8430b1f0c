"""Load: 16 concurrent clients (threads and asyncio) against one EnterpriseRAG with its bounded
connection pool: no errors, and no cross-talk (each result holds its own team's code word, only
from sources its user may read, and nothing of another team's).

Short by design; throughput, p95 and the memory soak are in benchmarks/reliability.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from enterprise_rag import EnterpriseRAG
from enterprise_rag.config import load_settings
from enterprise_rag.testing import load, tenants

CLIENTS = 16


@pytest.fixture
def loaded(fresh_dsn: str, tmp_path: Path, embed_model: Any) -> Iterator[EnterpriseRAG]:
    generator, grader = tenants.scripted_llms()
    settings = load_settings(None, database={"dsn": fresh_dsn, "pool_max_size": 4})  # fewer connections than clients
    with EnterpriseRAG(data_dir=tmp_path / "data", settings=settings, embed_model=embed_model,
                       generator=generator, grader=grader) as rag:  # fmt: skip
        report = rag.ingest(tenants.write_corpus(tmp_path / "docs", CLIENTS))
        assert len(report.added) == CLIENTS + 1 and not report.failed
        yield rag


def _assert_clean(results: list[load.CallResult], expected: int) -> None:
    assert len(results) == expected
    bad = [(r.team, r.op, r.error, r.problems) for r in results if not r.ok]
    assert bad == []
    assert sorted({r.team for r in results}) == list(range(CLIENTS))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("op", ["retrieve", "query"])
def test_threads_share_one_rag_without_errors_or_cross_talk(loaded: EnterpriseRAG, op: str) -> None:
    _assert_clean(load.run_threads(loaded, CLIENTS, rounds=2, op=op), CLIENTS * 2)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("op", ["retrieve", "query"])
def test_asyncio_clients_share_one_rag_without_errors_or_cross_talk(loaded: EnterpriseRAG, op: str) -> None:
    _assert_clean(load.run_asyncio(loaded, CLIENTS, rounds=2, op=op), CLIENTS * 2)


def test_the_cross_talk_check_catches_another_teams_result(loaded: EnterpriseRAG) -> None:
    """The check itself: team 1's result judged as team 0's is cross-talk."""
    res = loaded.query(tenants.question(1), user=tenants.principal(1))
    assert tenants.code_word(1) in res.answer
    problems = tenants.cross_talk(0, [res.answer], [c.source for c in res.citations])
    assert f"code {tenants.code_word(1)}" in problems and f"source {tenants.team_file(1)}" in problems
