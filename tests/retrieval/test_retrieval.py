"""The retriever as a LlamaIndex component, node metadata, superseded handling, and the pure helpers.

Database-backed tests run on the real embedded PostgreSQL with the real local
embedding model; the corpus (markdown with front-matter and a two-page PDF) is
ingested once per module. The merge / fusion / query-word helpers are unit-tested
on hand-made inputs.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from fpdf import FPDF
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.retrieval.merging import auto_merge
from enterprise_rag.retrieval.retriever import RetrievalOptions, fuse_rankings
from enterprise_rag.store.parents import ParentRow
from enterprise_rag.store.search import Hit, SearchParams, search
from enterprise_rag.store.vector_store import PgRagVectorStore
from enterprise_rag.testing import ScriptedLLM
from enterprise_rag.text import query_words
from tests.support.databases import create_db, drop_db, owner_connection

MODES = ("dense", "text", "hybrid")

REFUND_BODY = """
## Refund window

Customers may ask for a refund within thirty days of purchase. The refund goes back to the original
payment method, and the support agent records the reason in the ticket before approving it.

## Exceptions

Annual plans are refunded pro rata after the first month. Gift cards are never refunded, and a
refund for a disputed charge waits until the card network closes the dispute.
"""

SECRET_BODY = """
## Treasury reserve

The obsidianledger reserve holds the refund float for the quarter. Only finance may see the
obsidianledger balance, the refund reserve ratio and the name of the bank that holds it.
"""

PDF_PAGES = [
    "Travel guide. Book flights through the travel desk at least fourteen days ahead. The travel desk "
    "compares three fares and picks the cheapest refundable one.",
    "Hotel stays. The nightly hotel allowance is one hundred and eighty euros in capital cities. "
    "Receipts for every hotel night go to the expense system within a week of return.",
]


def _md(title: str, body: str, **front: object) -> str:
    fm = yaml.safe_dump({"title": title, **front}, sort_keys=False, allow_unicode=True).strip()
    return f"---\n{fm}\n---\n\n# {title}\n{body}"


def _pdf(path: Path) -> None:
    pdf = FPDF()
    pdf.set_title("Travel and hotel guide")
    pdf.set_font("Helvetica", size=12)
    for text in PDF_PAGES:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    pdf.output(str(path))


@dataclass
class Corpus:
    rag: EnterpriseRAG
    dsn: str
    root: Path
    doc: dict[str, str]  # key -> document_id

    def rag_with(self, **retrieval: object) -> EnterpriseRAG:
        settings = load_settings(None, database={"dsn": self.dsn}, retrieval=retrieval)
        return EnterpriseRAG(data_dir=self.root / "data", settings=settings, embed_model=self.rag.providers.embed_model)


STAFF = Principal("sam", ["staff"])
FINANCE = Principal("fiona", ["staff", "finance"])


@pytest.fixture(scope="module")
def corpus(server_dsn: str, tmp_path_factory: pytest.TempPathFactory, embed_model) -> Iterator[Corpus]:  # type: ignore[no-untyped-def]
    name = f"retrieval_{os.getpid()}"
    dsn = create_db(server_dsn, name)
    root = tmp_path_factory.mktemp("retrieval")
    rag = EnterpriseRAG(
        data_dir=root / "data", settings=load_settings(None, database={"dsn": dsn}), embed_model=embed_model
    )
    docs = root / "docs"
    docs.mkdir()
    files = {
        "current": _md("Refund policy", REFUND_BODY, effective_date="2025-03-01", allowed_groups=["staff"]),
        "superseded": _md(
            "Refund policy", REFUND_BODY, effective_date="2023-01-01", status="superseded", allowed_groups=["staff"]
        ),
        "secret": _md("Treasury", SECRET_BODY, effective_date="2025-06-30", allowed_groups=["finance"]),
    }
    for key, text in files.items():
        (docs / f"{key}.md").write_text(text, encoding="utf-8")
    report = rag.ingest([docs / f"{k}.md" for k in files])
    assert not report.failed, report.failed
    _pdf(docs / "guide.pdf")
    report = rag.ingest([docs / "guide.pdf"], allowed_groups=["staff"])
    assert not report.failed, report.failed
    with psycopg.connect(dsn) as conn:
        ids = {Path(s).stem: d for d, s in conn.execute("SELECT document_id, source FROM rag_documents")}
    assert set(ids) == {"current", "superseded", "secret", "guide"}
    yield Corpus(rag, dsn, root, ids)
    rag.close()
    drop_db(server_dsn, name)


def _ids(nodes: list[NodeWithScore]) -> list[str]:
    return [n.node.node_id for n in nodes]


def _docs(nodes: list[NodeWithScore]) -> list[str]:
    return [n.node.metadata["document_id"] for n in nodes]


# --- a LlamaIndex BaseRetriever ---------------------------------------------------------------------


def test_retriever_is_a_llamaindex_base_retriever_and_sync_equals_async(corpus: Corpus) -> None:
    for mode in MODES:
        retriever = corpus.rag.as_retriever(STAFF, top_k=5, options=RetrievalOptions(mode=mode))
        assert isinstance(retriever, BaseRetriever)
        sync = retriever.retrieve("How long is the refund window?")
        async_ = asyncio.run(retriever.aretrieve("How long is the refund window?"))
        assert sync, mode
        assert _ids(sync) == _ids(async_), mode
        assert [n.score for n in sync] == pytest.approx([n.score for n in async_])
        # a QueryBundle works as well as a string
        assert _ids(retriever.retrieve(QueryBundle("How long is the refund window?"))) == _ids(sync)


def test_plugs_into_a_stock_retriever_query_engine_with_permission_filtered_sources(corpus: Corpus) -> None:
    question = "What is the obsidianledger refund reserve ratio?"
    secret = corpus.doc["secret"]

    engine = RetrieverQueryEngine.from_args(corpus.rag.as_retriever(STAFF, top_k=5), llm=MockLLM())
    response = engine.query(question)
    assert response.source_nodes, "staff can read the refund documents, so sources are expected"
    assert secret not in _docs(response.source_nodes)
    assert all(n.node.metadata["document_id"] in corpus.doc.values() for n in response.source_nodes)
    # MockLLM echoes its prompt: the context the LLM saw carried none of the secret text
    echoed = str(response).lower()
    assert "thirty days of purchase" in echoed  # the readable context did reach the LLM
    assert "obsidianledger reserve holds" not in echoed

    engine = RetrieverQueryEngine.from_args(corpus.rag.as_retriever(FINANCE, top_k=5), llm=MockLLM())
    response = engine.query(question)
    assert secret in _docs(response.source_nodes)  # the same engine shape does find it for finance

    nobody = RetrieverQueryEngine.from_args(corpus.rag.as_retriever(Principal("x", ["none"])), llm=MockLLM())
    assert nobody.query(question).source_nodes == []


def test_node_metadata_carries_the_contract_fields(corpus: Corpus) -> None:
    nodes = corpus.rag.retrieve("refund window hotel allowance travel desk", user=STAFF, top_k=50)
    assert {corpus.doc["current"], corpus.doc["superseded"], corpus.doc["guide"]} <= set(_docs(nodes))
    for n in nodes:
        meta = n.node.metadata
        for key in ("source", "document_id", "title", "effective_date", "status"):
            assert key in meta, (key, meta)
        assert meta["source"].endswith((".md", ".pdf"))
        assert meta["document_id"] in corpus.doc.values()
    by_doc = {n.node.metadata["document_id"]: n.node.metadata for n in nodes}
    current = by_doc[corpus.doc["current"]]
    assert (current["title"], current["effective_date"], current["status"]) == (
        "Refund policy",
        "2025-03-01",
        "current",
    )
    old = by_doc[corpus.doc["superseded"]]
    assert (old["effective_date"], old["status"]) == ("2023-01-01", "superseded")
    # PDF passages carry the page they come from
    pdf_nodes = [n for n in nodes if n.node.metadata["document_id"] == corpus.doc["guide"]]
    assert pdf_nodes
    for n in pdf_nodes:
        page = n.node.metadata["page"]
        assert isinstance(page, int) and page in (1, 2)
        assert n.node.metadata["source"].endswith("guide.pdf")
    hotel = corpus.rag.retrieve("nightly hotel allowance in capital cities", user=STAFF, top_k=1)
    assert hotel[0].node.metadata["document_id"] == corpus.doc["guide"]
    assert "hotel" in hotel[0].node.get_content().lower()
    assert 2 in hotel[0].node.metadata.get("pages", [hotel[0].node.metadata["page"]])
    # identifiers are kept from the LLM's view of the node, the source and title are not
    llm_view = hotel[0].node.get_content(metadata_mode=MetadataMode.LLM)
    assert corpus.doc["guide"] not in llm_view and "guide.pdf" in llm_view


# --- superseded documents ---------------------------------------------------------------------------

REFUND_Q = "Within how many days can customers ask for a refund?"


def test_superseded_is_demoted_by_default(corpus: Corpus) -> None:
    current, old = corpus.doc["current"], corpus.doc["superseded"]
    assert corpus.rag.settings.retrieval.superseded == "demote"
    for mode in MODES:
        nodes = corpus.rag.as_retriever(STAFF, top_k=10, options=RetrievalOptions(mode=mode)).retrieve(REFUND_Q)
        docs = _docs(nodes)
        assert current in docs and old in docs, (mode, docs)  # demoted, not hidden
        assert docs.index(current) < docs.index(old), mode
        best = {d: max(n.score or 0.0 for n in nodes if n.node.metadata["document_id"] == d) for d in (current, old)}
        # identical text: the only difference is the demotion factor (0.5)
        assert best[old] == pytest.approx(0.5 * best[current], rel=0.1), (mode, best)
        # every passage of the current version ranks above every passage of the superseded one
        last_current = max(i for i, d in enumerate(docs) if d == current)
        first_old = min(i for i, d in enumerate(docs) if d == old)
        assert last_current < first_old, (mode, docs)


def test_superseded_exclude_never_returns_it(corpus: Corpus) -> None:
    rag = corpus.rag_with(superseded="exclude")
    try:
        for mode in MODES:
            for k in (1, 5, 50):
                nodes = rag.as_retriever(STAFF, top_k=k, options=RetrievalOptions(mode=mode)).retrieve(REFUND_Q)
                assert nodes and corpus.doc["superseded"] not in _docs(nodes), (mode, k)
                assert all(n.node.metadata["status"] != "superseded" for n in nodes)
        params = SearchParams(candidates=500, superseded="exclude")
        q = rag.providers.embed_model.get_query_embedding(REFUND_Q)
        with owner_connection(rag) as conn:
            for mode in MODES:
                hits = search(conn, STAFF, REFUND_Q, q, params, mode)
                assert hits and corpus.doc["superseded"] not in {h.document_id for h in hits}
        store = PgRagVectorStore(rag.db, STAFF, settings=rag.settings.retrieval)
        for query_mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.HYBRID):
            query = VectorStoreQuery(query_embedding=q, query_str=REFUND_Q, similarity_top_k=50, mode=query_mode)
            found = store.query(query).nodes or []
            assert found and all(n.metadata["status"] != "superseded" for n in found), query_mode
        default = PgRagVectorStore(rag.db, STAFF).query(VectorStoreQuery(query_embedding=q, similarity_top_k=50))
        assert any(n.metadata["status"] == "superseded" for n in default.nodes or [])  # the defaults only demote it
    finally:
        rag.close()


def test_superseded_keep_returns_both_undemoted(corpus: Corpus) -> None:
    current, old = corpus.doc["current"], corpus.doc["superseded"]
    rag = corpus.rag_with(superseded="keep")
    try:
        for mode in MODES:
            nodes = rag.as_retriever(STAFF, top_k=10, options=RetrievalOptions(mode=mode)).retrieve(REFUND_Q)
            docs = _docs(nodes)
            assert current in docs and old in docs, (mode, docs)
            best = {
                d: max(n.score or 0.0 for n in nodes if n.node.metadata["document_id"] == d) for d in (current, old)
            }
            # same text, no demotion: the best scores differ by at most one rank position
            assert best[old] == pytest.approx(best[current], rel=0.05), (mode, best)
    finally:
        rag.close()


# --- auto-merge ------------------------------------------------------------------------------------


def _hit(node_id: str, parent: str | None, score: float, sim: float | None = None) -> Hit:
    return Hit(
        node_id=node_id, document_id="d", parent_id=parent, text=f"text of {node_id}", metadata={"page": 1},
        score=score, dense_rank=int(100 - score * 100), text_rank=None, dense_similarity=sim,
    )  # fmt: skip


def _parent(node_id: str, parent: str | None, children: int) -> ParentRow:
    return ParentRow(node_id, parent, "d", f"text of {node_id}", {"page": 1, "level": 1}, children)


def test_auto_merge_replaces_most_children_by_their_parent() -> None:
    hits = [_hit("a1", "P", 0.9, 0.8), _hit("x", "Q", 0.8), _hit("a2", "P", 0.7, 0.6), _hit("a3", "P", 0.6, 0.5)]
    parents = {"P": _parent("P", None, 4), "Q": _parent("Q", None, 10)}
    merged = auto_merge(hits, parents, threshold=0.5)
    assert [h.node_id for h in merged] == ["P", "x"]
    p = merged[0]
    assert p.text == "text of P" and p.parent_id is None and p.document_id == "d"
    assert p.score == 0.9 and p.dense_rank == hits[0].dense_rank  # best child's score and rank
    assert p.dense_similarity == 0.8
    assert p.extra["merged_from"] == ["a1", "a2", "a3"]
    assert merged[1] is hits[1]  # the unrelated hit is untouched


def test_auto_merge_threshold_boundary() -> None:
    parents = {"P": _parent("P", None, 4)}
    two = [_hit("a1", "P", 0.9), _hit("a2", "P", 0.8)]
    assert [h.node_id for h in auto_merge(two, parents, 0.5)] == ["P"]  # 2/4 == 0.5 merges
    assert [h.node_id for h in auto_merge(two, parents, 0.51)] == ["a1", "a2"]
    three = [*two, _hit("a3", "P", 0.7)]
    assert [h.node_id for h in auto_merge(three, parents, 0.75)] == ["P"]  # 3/4 == 0.75 merges
    assert [h.node_id for h in auto_merge(three, parents, 0.76)] == ["a1", "a2", "a3"]
    one = [_hit("a1", "P", 0.9)]
    assert [h.node_id for h in auto_merge(one, {"P": _parent("P", None, 1)}, 1.0)] == ["P"]  # only child


def test_auto_merge_climbs_levels_and_keeps_rank_position() -> None:
    hits = [
        _hit("z", "R", 0.95),
        _hit("p1", "P", 0.9),
        _hit("q1", "Q", 0.85),
        _hit("p2", "P", 0.8),
        _hit("q2", "Q", 0.7),
    ]
    parents = {
        "P": _parent("P", "G", 2),
        "Q": _parent("Q", "G", 2),
        "G": _parent("G", None, 2),
        "R": _parent("R", None, 5),
    }
    merged = auto_merge(hits, parents, threshold=0.5)
    assert [h.node_id for h in merged] == ["z", "G"]
    assert merged[1].score == 0.9 and merged[1].extra["merged_from"] == ["P", "Q"]


def test_auto_merge_never_uses_a_parent_it_was_not_given() -> None:
    """Parents come from the ACL-checked fetch; one missing from it (unreadable) is never merged in."""
    hits = [_hit("a1", "P", 0.9), _hit("a2", "P", 0.8)]
    assert auto_merge(hits, {}, 0.5) == hits
    assert auto_merge(hits, {"P": _parent("P", None, 0)}, 0.5) == hits  # no division by zero
    assert auto_merge([], {"P": _parent("P", None, 2)}, 0.5) == []


# --- fusion and query words -------------------------------------------------------------------------


def test_fuse_rankings_is_reciprocal_rank_fusion() -> None:
    a, b, c, d = (_hit(n, None, 0.0) for n in "abcd")
    fused = fuse_rankings([[a, b, c], [b, c, d]], rrf_k=60)
    scores = {h.node_id: h.score for h in fused}
    assert scores == pytest.approx({"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 63 + 1 / 62, "d": 1 / 63})
    assert [h.node_id for h in fused] == ["b", "c", "a", "d"]
    # rank beats presence when k is small: [a, b] + [c, a] with k=1 -> a: 1/2 + 1/3, c: 1/2, b: 1/3
    fused = fuse_rankings([[a, b], [c, a]], rrf_k=1)
    assert [(h.node_id, round(h.score, 6)) for h in fused] == [
        ("a", round(5 / 6, 6)),
        ("c", 0.5),
        ("b", round(1 / 3, 6)),
    ]
    assert fuse_rankings([], 60) == [] and fuse_rankings([[]], 60) == []
    assert fused[0].text == "text of a"  # the hit itself is kept, only its score changes


def test_query_words_dedup_order_and_bound() -> None:
    assert query_words("The the THE cat's well-known café, 3.5% e-mail!") == [
        "the", "cat's", "well-known", "café", "3.5", "e-mail",
    ]  # fmt: skip
    assert query_words("") == [] and query_words("!!! ??? --;") == []
    words = [f"w{i}" for i in range(100)]
    assert query_words(" ".join(words)) == words[:64]
    # repeats do not use up the bound
    assert query_words(" ".join(["same"] * 500 + words)) == ["same", *words[:63]]
    assert query_words("x" * 10_000) == ["x" * 10_000]
    assert query_words("'; DROP TABLE rag_nodes; --") == ["drop", "table", "rag_nodes"]


def _rewriting_rag(corpus: Corpus, grader: ScriptedLLM) -> EnterpriseRAG:
    """The corpus' store, with ``grader`` as the model of the optional LLM stages."""
    return EnterpriseRAG(data_dir=corpus.root / "data", settings=corpus.rag.settings,
                         embed_model=corpus.rag.providers.embed_model, grader=grader)  # fmt: skip


def test_multi_query_and_hyde_go_through_the_caller_and_read_list_replies(corpus: Corpus) -> None:
    def reply(messages: list[Any], kwargs: dict[str, Any]) -> str:
        system = messages[0].content or ""
        if "search queries" in system:  # the expansion prompt: a list, markers and all
            return "- refund window for annual plans\n2. money back period\n\nok"
        return "Refunds of annual plans are paid within thirty days of the request."

    grader = ScriptedLLM({"text": reply})
    staff = Principal("sam", ["staff"])
    with _rewriting_rag(corpus, grader) as rag:
        expanded = rag.as_retriever(staff, options=RetrievalOptions(multi_query=2)).retrieve_with_trace("refund window")
        hyde = rag.as_retriever(staff, options=RetrievalOptions(hyde=True)).retrieve_with_trace("refund window")
    assert expanded.trace["queries"] == ["refund window", "refund window for annual plans", "money back period"]
    assert expanded.nodes and set(_docs(expanded.nodes)) <= {corpus.doc[k] for k in ("current", "superseded", "guide")}
    assert hyde.trace["hyde"].startswith("Refunds of annual plans") and hyde.nodes
    assert grader.count("text") == 2


def test_a_failed_follow_up_rewrite_is_tried_once_and_concatenates(corpus: Corpus) -> None:
    def fail(messages: list[Any], kwargs: dict[str, Any]) -> str:
        raise TimeoutError("the model did not answer")

    grader = ScriptedLLM({"standalone": fail})
    history = [{"role": "user", "content": "Tell me about annual plans."}, {"role": "assistant", "content": "Sure."}]
    with _rewriting_rag(corpus, grader) as rag:
        result = rag.as_retriever(Principal("sam", ["staff"]), history=history).retrieve_with_trace("and refunds?")
    assert result.trace["rewrite"]["method"] == "concatenation"
    assert result.trace["queries"] == ["Tell me about annual plans. and refunds?"]
    assert grader.count("standalone") == 1
