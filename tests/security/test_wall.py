"""The insider's probe families of tests/security/wall.py, a few principals each: no bit, no row beyond.

benchmarks/leakage.py runs the same families at full size. The last test shows that the
estimate family measures: with the statistics of the text columns back on, it recovers bits.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.config import load_settings
from tests.security import harness, wall
from tests.security.harness import LeakCorpus
from tests.support.databases import create_db, drop_db, owner_connection
from tests.support.ingest import markdown_doc

DOCS = harness.make_docs(n_docs=16, n_groups=12, n_users=8, seed=11)


@pytest.fixture(scope="module")
def corpus(server_dsn: str, tmp_path_factory: pytest.TempPathFactory, embed_model) -> Iterator[LeakCorpus]:  # type: ignore[no-untyped-def]
    name = f"wall_corpus_{os.getpid()}"
    dsn = create_db(server_dsn, name)
    found = harness.ingest_corpus(dsn, tmp_path_factory.mktemp("wall") / "data", DOCS, embed_model)
    yield found
    found.rag.close()
    drop_db(server_dsn, name)


@pytest.fixture(scope="module")
def principals(corpus: LeakCorpus) -> list[Principal]:
    found = wall.real_principals(corpus, 4)
    assert len(found) == 4
    return found


def _clean(family: wall.Family, least_probes: int) -> None:
    assert family.probes >= least_probes
    assert (family.bits, family.rows_beyond) == (0, 0), family.examples


def test_estimates_tell_nothing(corpus: LeakCorpus, principals: list[Principal]) -> None:
    _clean(wall.estimates(corpus, principals, per_principal=3), least_probes=4 * 3 * 6)


def test_settings_widened_within_a_statement_read_nothing_more(corpus: LeakCorpus, principals: list[Principal]) -> None:
    _clean(wall.mid_statement(corpus, principals), least_probes=4 * len(wall.READS) * len(wall.SHAPES))


def test_the_ranking_and_the_statistics_do_not_tell_which_words_exist(
    corpus: LeakCorpus, principals: list[Principal]
) -> None:
    _clean(wall.term_oracle(corpus, principals, per_principal=3), least_probes=4 * 5)


def test_unreadable_documents_move_no_score(corpus: LeakCorpus, principals: list[Principal], tmp_path: Path) -> None:
    _clean(wall.score_differential(corpus, principals[:2], tmp_path, added=2), least_probes=2 * 3 * 2 * 2 * 2)


def test_another_store_on_the_server_is_out_of_reach(
    corpus: LeakCorpus, server_dsn: str, tmp_path: Path
) -> None:
    name = f"wall_other_{os.getpid()}"
    other = EnterpriseRAG(data_dir=tmp_path / "other", settings=load_settings(None, database={
        "dsn": create_db(server_dsn, name)}))  # fmt: skip
    try:
        doc = tmp_path / "other.md"
        doc.write_text(markdown_doc("Other", "The other store's payroll runs on the ninth."), encoding="utf-8")
        assert not other.ingest([doc], allowed_groups=["payroll"]).failed
        family = wall.cross_database(corpus, other)
        _clean(family, least_probes=1)
    finally:
        other.close()
        drop_db(server_dsn, name)


def test_the_estimate_probe_recovers_bits_when_statistics_describe_forbidden_text(
    corpus: LeakCorpus, principals: list[Principal]
) -> None:
    """Not a property of the package: the probe's own check, so that its 0 above means something."""
    with owner_connection(corpus.rag) as owner:
        owner.execute("ALTER TABLE rag_nodes ALTER COLUMN text SET STATISTICS -1")
    try:
        family = wall.estimates(corpus, principals[:2], per_principal=3)
        assert family.bits > 0
    finally:
        with owner_connection(corpus.rag) as owner:
            owner.execute("SELECT rag_no_statistics()")
