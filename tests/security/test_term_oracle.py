"""No corpus-wide oracle in the text half: a principal's BM25 scores and ranks come from what it may read.

Real embedded PostgreSQL and the real local embedding model; searches run as the package's
login role under a signed principal (the reader role's row-level security).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.store.search import Hit, Mode, SearchParams, search
from tests.support.ingest import markdown_doc

STAFF = Principal("sam", ["staff"])
OPEN = {
    "travel": "Travel bookings go through the travel desk fourteen days ahead; the desk books rail first.",
    "refunds": "Refunds of annual plans take thirty days. Gift cards are never refunded by the desk.",
    "audits": "Quarterly audits of the booking policy go to the review board with the pelican desk's figures.",
    "pelican": "The pelican rota names who staffs the travel desk each week, and who covers holidays.",
}
# Forbidden to STAFF: the same words, and a word of their own
HIDDEN = {
    "salaries": "Salary bands of the travel desk: the zanzibarine allowance, refunds of relocation costs.",
    "review": "The review board's audit: bookings, refunds, the pelican rota and travel policy.",
}
QUESTIONS = [
    "How far ahead are travel bookings made?",
    "refunds desk review board pelican",
    # a probe: the rarest readable words padded with one that occurs only in hidden documents
    "pelican rota quarterly zanzibarine",
]


def _write(folder: Path, docs: dict[str, str], groups: list[str]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, body in docs.items():
        path = folder / f"{name}.md"
        path.write_text(markdown_doc(name.title(), body, allowed_groups=groups), encoding="utf-8")
        paths.append(path)
    return paths


def _results(rag: EnterpriseRAG, mode: Mode, exact_below: int) -> list[list[tuple[str, float, int | None, int | None]]]:
    params = SearchParams(candidates=20, exact_scan_below=exact_below)
    out = []
    for question in QUESTIONS:
        vector = rag.providers.embed_model.get_query_embedding(question) if mode != "text" else None
        with rag.db.connection_for(STAFF) as conn:
            hits: list[Hit] = search(conn, STAFF, question, vector, params, mode)
        out.append([(h.node_id, round(h.score, 12), h.dense_rank, h.text_rank) for h in hits])
    return out


@pytest.mark.parametrize("exact_below", [0, 1_000_000], ids=["broad", "small"])
def test_documents_a_principal_cannot_read_change_none_of_its_scores_or_ranks(
    rag: EnterpriseRAG, tmp_path: Path, exact_below: int
) -> None:
    assert not rag.ingest(_write(tmp_path / "open", OPEN, ["staff"])).failed
    modes: list[Mode] = ["text", "hybrid"]
    before = {mode: _results(rag, mode, exact_below) for mode in modes}
    assert all(before["text"]), "every question finds readable text"
    hidden = _write(tmp_path / "hidden", HIDDEN, ["hr"])
    assert not rag.ingest(hidden).failed
    hr_hits = search_as(rag, Principal("hana", ["hr"]), "zanzibarine")
    assert hr_hits, "the hidden documents are searchable by their readers"
    for mode in modes:
        assert _results(rag, mode, exact_below) == before[mode], mode
    for path in hidden:
        assert rag.delete(path)
    for mode in modes:
        assert _results(rag, mode, exact_below) == before[mode], mode


def search_as(rag: EnterpriseRAG, principal: Principal, question: str, max_terms: int = 32) -> list[Hit]:
    with rag.db.connection_for(principal) as conn:
        return search(conn, principal, question, None, SearchParams(candidates=10, bm25_max_terms=max_terms), "text")


def test_a_word_only_in_forbidden_documents_is_not_counted(rag: EnterpriseRAG, tmp_path: Path) -> None:
    """The term oracle: only the rarest question words are searched, so a probe word that counted where the
    principal cannot read would displace its own words. It acts as a word present nowhere, and a plain read
    of the statistics does not list it."""
    assert not rag.ingest(_write(tmp_path / "open", OPEN, ["staff"])).failed
    assert not rag.ingest(_write(tmp_path / "hidden", HIDDEN, ["hr"])).failed
    probe = search_as(rag, STAFF, "pelican zanzibarine", max_terms=1)
    absent = search_as(rag, STAFF, "pelican quokkaberry", max_terms=1)
    assert probe and [(h.node_id, h.score) for h in probe] == [(h.node_id, h.score) for h in absent]
    with rag.db.connection_for(STAFF) as conn:
        for table in ("rag_bm25_terms", "rag_bm25_postings"):
            count = f"SELECT count(*) FROM {table} WHERE lexeme = (SELECT lexeme FROM unnest(to_tsvector(%s)))"
            assert conn.execute(count, ("zanzibarine",)).fetchone() == (0,), table
            assert conn.execute(count, ("pelican",)).fetchone() != (0,), table
