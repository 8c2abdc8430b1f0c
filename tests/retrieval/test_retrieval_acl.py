"""The ACL holds in every retrieval path, and hostile input neither errors nor widens access.

Real embedded PostgreSQL and the real local embedding model throughout. A corpus of
markdown documents, each with a distinctive marker word and an ACL (several with
group names full of quotes, SQL and JSON fragments, wildcards, unicode, a 1000-char
name and number-like strings), is ingested once per module. For every principal the
visible set of documents is computed in Python from the ACLs assigned here, and every
path (``rag.retrieve`` per mode and depth, raw SQL search, parent fetch, section
expansion, rerank input, the LlamaIndex vector store) must return only that set.

A second module database holds 30,000 random-vector leaves, 1% of them readable by
one group, to prove that filtered HNSW (iterative scan) and the exact path both
return exactly k rows.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import NodeWithScore
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode
from pgvector.psycopg import register_vector

from enterprise_rag import EnterpriseRAG, PermissionDeniedError, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.retrieval.merging import expand_within_section
from enterprise_rag.retrieval.retriever import PermissionScopedRetriever, RetrievalOptions, Retriever
from enterprise_rag.schema.documents import Chunk, DocumentRecord
from enterprise_rag.store.parents import fetch_ancestors
from enterprise_rag.store.scoping import act_as_service
from enterprise_rag.store.search import Hit, SearchParams, build_search_sql, search
from enterprise_rag.store.vector_store import PgRagVectorStore
from enterprise_rag.store.writer import PreparedDocument, write_documents
from tests.support.acl import CachedQueryEmbedding, RecordingReranker, document_text
from tests.support.databases import create_db, drop_db, owner_connection

MODES = ("dense", "text", "hybrid")
DEPTHS = (1, 5, 50)

# --- hostile group names ----------------------------------------------------------------------------

INJECTION = "zz'] OR 1=1 OR metadata_::jsonb ?| array['y"
DROP = "'; DROP TABLE rag_nodes; --"
LONG_GROUP = ("long-group-Ω-" * 100)[:1000]  # ingest refuses names over 2 kB (see test_ingest_refuses_huge_group)
assert len(LONG_GROUP) == 1000

# document key -> (marker word, allowed_groups, allowed_users)
ACLS: dict[str, tuple[str, list[str], list[str]]] = {
    "public": ("aldervane", ["all-staff"], []),
    "eng_a": ("brisketon", ["eng"], []),
    "eng_b": ("corvidale", ["eng", "platform"], []),
    "hr": ("dunmorrow", ["hr"], []),
    "obrien": ("ellisquay", ["O'Brien"], []),
    "injection": ("fennimark", [INJECTION], []),
    "brackets": ("galloweth", ["[ops]", "]{[", "a[1]"], []),
    "wildcards": ("hesperine", ["50%_off\\path", "%", "_"], []),
    "dashes": ("ivorlund", ["--", ";", "--;"], []),
    "json": ("jasperine", ['{"a":1}'], []),
    "drop": ("osprelon", [DROP], []),
    "unicode": ("lumenfall", ["Grüße-グループ-🙂", "naïve café"], []),
    "long": ("mirrowick", [LONG_GROUP], []),
    "num_e": ("nettlebar", ["1e3"], []),
    "num_zero": ("orrinvale", ["007"], []),
    "alice_only": ("pellucid", [], ["alice"]),
    "bob_hr": ("quillmore", ["hr"], ["bob"]),
}
MARKERS = {key: marker for key, (marker, _, _) in ACLS.items()}
ALL_GROUPS = sorted({g for _, groups, _ in ACLS.values() for g in groups})

# Strings that must match no document: near misses, casts, wildcards, array-literal tricks.
NON_MATCHING_GROUPS = [
    "O''Brien", "o'brien", "OBrien", "O\\'Brien", "ENG", " eng", "eng ", "{eng}", "eng,hr", '"eng"', "{eng,hr}",
    "1000", "1e+3", "1E3", "7", "07", "0007", "7.0", "%%", "__", "*", ".*", "\\", "'", "''", "1=1", "' OR '1'='1",
    "' OR 1=1 --", "zz", "y", "a", "metadata_", "[ops", "ops", '{"a": 1}', "{'a':1}", "DROP TABLE rag_nodes",
    "Grüsse-グループ-🙂", "naive cafe", LONG_GROUP[:-1], LONG_GROUP + "x", "x" * 5000, "all-staff\x00", "\x00",
    "null", "NULL", "true", "*", "any", "ALL", "public", "\u200beng", "ｅｎｇ",
]  # fmt: skip


def _principals() -> dict[str, Principal]:
    people = {
        "eng": Principal("erin", ["eng"]),
        "eng_platform": Principal("pat", ["platform", "eng"]),
        "hr": Principal("harry", ["hr"]),
        "staff": Principal("sam", ["all-staff"]),
        "alice": Principal("alice", []),
        "bob": Principal("bob", ["eng"]),
        "bob_alone": Principal("bob"),
        "mixed": Principal("carol", ["O'Brien", INJECTION, "1e3"]),
        "nobody": Principal("nobody-matches-this", []),
        "empty": Principal("", []),
        "empty_group": Principal("", [""]),
        "hostile_user": Principal("' OR 1=1 --", []),
        "alice_case": Principal("ALICE", ["Eng"]),
        "all_non_matching": Principal("zed", NON_MATCHING_GROUPS),
    }
    for i, group in enumerate(ALL_GROUPS):
        people[f"group_{i}"] = Principal(f"g{i}", [group])
    return people


PRINCIPALS = _principals()
# One principal per near-miss name (each must see nothing); checked on every path in one loop.
MISSES = {f"miss_{i}": Principal(f"m{i}", [group]) for i, group in enumerate(NON_MATCHING_GROUPS)}


def visible_keys(p: Principal) -> set[str]:
    """The documents ``p`` may read, from the ACLs assigned above (the test's own model)."""
    return {key for key, (_, groups, users) in ACLS.items() if set(p.groups) & set(groups) or set(p.users) & set(users)}


# Sanity of the model itself: the tricky principals see what we think they see.
assert visible_keys(PRINCIPALS["alice"]) == {"alice_only"}
assert visible_keys(PRINCIPALS["bob"]) == {"eng_a", "eng_b", "bob_hr"}
assert visible_keys(PRINCIPALS["mixed"]) == {"obrien", "injection", "num_e"}
for _name in ("nobody", "empty", "empty_group", "hostile_user", "alice_case", "all_non_matching"):
    assert visible_keys(PRINCIPALS[_name]) == set(), _name


ALL_MARKERS_QUESTION = "quarterly policy procedure handbook " + " ".join(MARKERS.values())


# --- the corpus, ingested once per module ------------------------------------------------------------


@dataclass
class Corpus:
    rag: EnterpriseRAG
    dsn: str
    key_of: dict[str, str]  # document_id -> key
    doc_of: dict[str, str]  # key -> document_id
    nodes_of: dict[str, set[str]] = field(default_factory=dict)  # key -> every node id
    leaf_count: int = 0

    def keys(self, nodes: list[NodeWithScore]) -> list[str]:
        return [self.key_of[n.node.metadata["document_id"]] for n in nodes]


@pytest.fixture(scope="module")
def corpus(server_dsn: str, tmp_path_factory: pytest.TempPathFactory, embed_model) -> Iterator[Corpus]:  # type: ignore[no-untyped-def]
    name = f"acl_corpus_{os.getpid()}"
    dsn = create_db(server_dsn, name)
    root = tmp_path_factory.mktemp("acl_corpus")
    rag = EnterpriseRAG(
        data_dir=root / "data",
        settings=load_settings(None, database={"dsn": dsn}),
        embed_model=CachedQueryEmbedding(embed_model),
    )
    docs = root / "docs"
    docs.mkdir()
    for key, (marker, groups, users) in ACLS.items():
        path = docs / f"{key}.md"
        path.write_text(document_text(key, marker), encoding="utf-8")
        report = rag.ingest([path], allowed_groups=groups, allowed_users=users)
        assert not report.failed, report.failed
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT document_id, source, allowed_groups, allowed_users FROM rag_documents").fetchall()
        key_of = {doc_id: Path(source).stem for doc_id, source, _, _ in rows}
        # the stored ACL is exactly the one assigned (nothing mangled on the way in)
        for doc_id, _, groups, users in rows:
            _, want_groups, want_users = ACLS[key_of[doc_id]]
            assert sorted(groups) == sorted(want_groups) and sorted(users) == sorted(want_users)
        found = Corpus(rag, dsn, key_of, {k: d for d, k in key_of.items()})
        for node_id, doc_id in conn.execute("SELECT node_id, document_id FROM rag_nodes"):
            found.nodes_of.setdefault(key_of[doc_id], set()).add(node_id)
        found.leaf_count = conn.execute("SELECT count(*) FROM rag_nodes WHERE is_leaf").fetchone()[0]  # type: ignore[index]
    assert set(key_of.values()) == set(ACLS)
    # the corpus has real hierarchy: parents with several leaves, so merging and expansion run
    assert all(len(ids) >= 3 for ids in found.nodes_of.values())
    yield found
    rag.close()
    drop_db(server_dsn, name)


def _assert_only_visible(corpus: Corpus, p: Principal, nodes: list[NodeWithScore], where: str) -> set[str]:
    """Every node's document is visible to ``p`` and no node text carries an invisible doc's marker."""
    allowed = visible_keys(p)
    got = corpus.keys(nodes)
    leaked = set(got) - allowed
    assert not leaked, f"{where}: {p} received documents {leaked}"
    forbidden_markers = [MARKERS[k] for k in ACLS if k not in allowed]
    for n in nodes:
        text = n.node.get_content().lower()
        hits = [m for m in forbidden_markers if m in text]
        assert not hits, f"{where}: {p} received text of invisible documents {hits}"
    return set(got)


def _assert_hits_visible(corpus: Corpus, p: Principal, hits: list[Hit], where: str) -> set[str]:
    allowed = visible_keys(p)
    got = {corpus.key_of[h.document_id] for h in hits}
    assert got <= allowed, f"{where}: {p} received documents {got - allowed}"
    forbidden_markers = [MARKERS[k] for k in ACLS if k not in allowed]
    for h in hits:
        assert not [m for m in forbidden_markers if m in h.text.lower()], f"{where}: invisible text in {h.node_id}"
    return got


# --- every principal, every path -------------------------------------------------------------------


@pytest.mark.parametrize("who", sorted(PRINCIPALS))
def test_retrieve_returns_only_visible_documents_in_every_mode_and_depth(corpus: Corpus, who: str) -> None:
    p = PRINCIPALS[who]
    allowed = visible_keys(p)
    for mode in MODES:
        for k in DEPTHS:
            retriever = corpus.rag.as_retriever(p, top_k=k, options=RetrievalOptions(mode=mode))
            nodes = retriever.retrieve(ALL_MARKERS_QUESTION)
            got = _assert_only_visible(corpus, p, nodes, f"retrieve mode={mode} k={k}")
            assert len(nodes) <= k
            if allowed:
                assert nodes, f"{who} sees {allowed} but got nothing (mode={mode}, k={k})"
            if k == 50:
                # the question names every document, and the visible scope is small: all of it comes back
                assert got == allowed, (mode, got, allowed)
    # the public entry point with its default options
    nodes = corpus.rag.retrieve(ALL_MARKERS_QUESTION, user=p, top_k=50)
    assert _assert_only_visible(corpus, p, nodes, "rag.retrieve") == allowed


@pytest.mark.parametrize("who", sorted(PRINCIPALS))
def test_raw_sql_search_returns_only_visible_leaves(corpus: Corpus, who: str) -> None:
    p = PRINCIPALS[who]
    allowed = visible_keys(p)
    vec = corpus.rag.providers.embed_model.get_query_embedding(ALL_MARKERS_QUESTION)
    text_rankings = []
    # broad paths (HNSW; BM25 hits ACL-checked one by one) and scoped paths (exact; BM25 joined to the scope)
    for exact_below in (0, 1_000_000):
        params = SearchParams(candidates=corpus.leaf_count + 10, exact_scan_below=exact_below)
        with owner_connection(corpus.rag) as conn:
            for mode in MODES:
                hits = search(conn, p, ALL_MARKERS_QUESTION, vec, params, mode)
                if mode == "text":
                    text_rankings.append([h.node_id for h in hits])
                got = _assert_hits_visible(corpus, p, hits, f"search mode={mode}")
                assert got == allowed, (mode, exact_below, got, allowed)
                # every hit is a leaf of a visible document; exactly the visible leaves for the full-scope modes
                visible_leaves = {
                    r[0]
                    for r in conn.execute(
                        "SELECT node_id FROM rag_nodes WHERE is_leaf AND document_id = ANY(%s)",
                        ([corpus.doc_of[k] for k in allowed],),
                    )
                }
                ids = [h.node_id for h in hits]
                assert len(ids) == len(set(ids))
                assert set(ids) <= visible_leaves
                if mode != "text":
                    assert set(ids) == visible_leaves, (mode, exact_below)
    # both ACL paths of the BM25 half rank the same leaves in the same order
    assert text_rankings[0] == text_rankings[1]


@pytest.mark.parametrize("who", sorted(PRINCIPALS))
def test_parent_fetch_never_returns_unreadable_nodes(corpus: Corpus, who: str) -> None:
    p = PRINCIPALS[who]
    allowed = visible_keys(p)
    every_id = sorted(set().union(*corpus.nodes_of.values()))
    forbidden_ids = sorted(i for k, ids in corpus.nodes_of.items() if k not in allowed for i in ids)
    with owner_connection(corpus.rag) as conn:
        assert fetch_ancestors(conn, p, forbidden_ids) == {}
        rows = fetch_ancestors(conn, p, every_id)
    assert {corpus.key_of[r.document_id] for r in rows.values()} == allowed
    assert set(rows) == {i for k in allowed for i in corpus.nodes_of[k]}
    for row in rows.values():
        assert not [MARKERS[k] for k in ACLS if k not in allowed and MARKERS[k] in row.text.lower()]


@pytest.mark.parametrize("who", ["eng", "eng_platform", "hr", "alice", "bob", "mixed", "group_0", "staff"])
def test_section_expansion_stays_in_the_hits_section_and_scope(corpus: Corpus, who: str) -> None:
    p = PRINCIPALS[who]
    vec = corpus.rag.providers.embed_model.get_query_embedding(ALL_MARKERS_QUESTION)
    params = SearchParams(candidates=corpus.leaf_count + 10)
    with owner_connection(corpus.rag) as conn:
        hits = search(conn, p, ALL_MARKERS_QUESTION, vec, params, "hybrid")
        assert hits
        grew = 0
        # one hit per call, so no hit is dropped as covered by another one's window
        for hit in hits:
            [out] = expand_within_section(conn, p, [hit], 100_000)
            _assert_hits_visible(corpus, p, [out], "expand")
            added = out.extra.get("expanded_with", [])
            own = conn.execute(
                "SELECT document_id, parent_id, breadcrumb FROM rag_nodes WHERE node_id = %s", (hit.node_id,)
            ).fetchone()
            window = conn.execute(
                "SELECT node_id, document_id, parent_id, breadcrumb, text FROM rag_nodes"
                " WHERE node_id = ANY(%s) ORDER BY position",
                ([hit.node_id, *added],),
            ).fetchall()
            assert len(window) == len(added) + 1
            for _, doc_id, parent_id, breadcrumb, _ in window:
                assert (doc_id, parent_id, breadcrumb) == own, "expansion crossed a document or section"
            assert out.text == "\n\n".join(r[4] for r in window)
            grew += bool(added)
        assert grew, "no hit had a same-section neighbour: the corpus does not exercise expansion"
        # all hits at once: the windows never repeat a node
        expanded = expand_within_section(conn, p, hits, 100_000)
        seen: list[str] = []
        for out in expanded:
            seen += [out.node_id, *out.extra.get("expanded_with", [])]
        assert len(seen) == len(set(seen))
        _assert_hits_visible(corpus, p, expanded, "expand all")


@pytest.mark.parametrize("reader,outsider", [("eng", "hr"), ("alice", "bob"), ("mixed", "nobody"), ("hr", "empty")])
def test_section_expansion_adds_nothing_for_a_principal_who_cannot_read_the_section(
    corpus: Corpus, reader: str, outsider: str
) -> None:
    """Hits handed over from another user's search gain no neighbours: the siblings are ACL-checked."""
    vec = corpus.rag.providers.embed_model.get_query_embedding(ALL_MARKERS_QUESTION)
    with owner_connection(corpus.rag) as conn:
        theirs = search(conn, PRINCIPALS[reader], ALL_MARKERS_QUESTION, vec, SearchParams(candidates=200), "hybrid")
        assert theirs and not (visible_keys(PRINCIPALS[reader]) & visible_keys(PRINCIPALS[outsider]))
        out = expand_within_section(conn, PRINCIPALS[outsider], theirs, 100_000)
    assert [h.text for h in out] == [h.text for h in theirs]
    assert not any(h.extra.get("expanded_with") for h in out)


@pytest.mark.parametrize("who", sorted(PRINCIPALS))
def test_rerank_input_is_permission_filtered(corpus: Corpus, who: str) -> None:
    p = PRINCIPALS[who]
    allowed = visible_keys(p)
    for mode in MODES:
        reranker = RecordingReranker()
        retriever = PermissionScopedRetriever(Retriever(
            db=corpus.rag.db, embed_model=corpus.rag.providers.embed_model, settings=corpus.rag.settings.retrieval,
            reranker=reranker,
        ), p, top_k=5, options=RetrievalOptions(mode=mode))  # fmt: skip
        nodes = retriever.retrieve(ALL_MARKERS_QUESTION)
        _assert_only_visible(corpus, p, nodes, f"after rerank mode={mode}")
        if not allowed:
            assert reranker.calls == [] and nodes == []
            continue
        [received] = reranker.calls
        assert reranker.queries == [ALL_MARKERS_QUESTION]
        assert _assert_only_visible(corpus, p, received, f"rerank input mode={mode}") == allowed
        # the reranker's order is the one returned
        assert [n.node.node_id for n in nodes] == [n.node.node_id for n in reversed(received)][:5]


@pytest.mark.parametrize("who", sorted(PRINCIPALS))
def test_llamaindex_vector_store_path_is_scoped(corpus: Corpus, who: str) -> None:
    p = PRINCIPALS[who]
    allowed = visible_keys(p)
    store = PgRagVectorStore(corpus.rag.db).for_principal(p)
    index = VectorStoreIndex.from_vector_store(store, embed_model=corpus.rag.providers.embed_model)
    for mode in ("default", "text_search", "hybrid"):
        retriever = index.as_retriever(similarity_top_k=20, vector_store_query_mode=mode)
        nodes = retriever.retrieve(ALL_MARKERS_QUESTION)
        got = _assert_only_visible(corpus, p, nodes, f"vector store mode={mode}")
        assert len(nodes) <= 20
        assert bool(got) == bool(allowed)


def test_unscoped_vector_store_refuses_to_query(corpus: Corpus) -> None:
    store = PgRagVectorStore(corpus.rag.db)
    vec = corpus.rag.providers.embed_model.get_query_embedding("policy")
    for mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.HYBRID):
        with pytest.raises(PermissionDeniedError):
            store.query(VectorStoreQuery(query_embedding=vec, query_str="policy", similarity_top_k=5, mode=mode))
    index = VectorStoreIndex.from_vector_store(store, embed_model=corpus.rag.providers.embed_model)
    with pytest.raises(PermissionDeniedError):
        index.as_retriever(similarity_top_k=5).retrieve("policy")
    with pytest.raises(PermissionDeniedError):
        PgRagVectorStore(corpus.rag.db, principal=None).query(VectorStoreQuery(query_embedding=vec))


# --- principals that must see nothing, or exactly their own ----------------------------------------


@pytest.mark.parametrize("who", ["nobody", "empty", "empty_group", "hostile_user", "alice_case", "all_non_matching"])
def test_principal_matching_nothing_sees_nothing_at_every_depth(corpus: Corpus, who: str) -> None:
    p = PRINCIPALS[who]
    for question in (ALL_MARKERS_QUESTION, "", "policy"):
        for k in DEPTHS:
            for mode in MODES:
                assert corpus.rag.as_retriever(p, top_k=k, options=RetrievalOptions(mode=mode)).retrieve(question) == []
        assert corpus.rag.retrieve(question, user=p, top_k=50) == []
        vec = corpus.rag.providers.embed_model.get_query_embedding(question)
        with owner_connection(corpus.rag) as conn:
            for mode in MODES:
                assert search(conn, p, question, vec, SearchParams(candidates=500, exact_scan_below=0), mode) == []
                assert search(conn, p, question, vec, SearchParams(candidates=500), mode) == []


def test_every_near_miss_group_name_sees_nothing_on_every_path(corpus: Corpus) -> None:
    """Quote-doubling, case, whitespace, casts, wildcards, array-literal tricks: each matches nothing."""
    every_id = sorted(set().union(*corpus.nodes_of.values()))
    vec = corpus.rag.providers.embed_model.get_query_embedding(ALL_MARKERS_QUESTION)
    for who, p in MISSES.items():
        assert visible_keys(p) == set(), who
        with owner_connection(corpus.rag) as conn:
            for mode in MODES:
                for exact_below in (0, 1_000_000):
                    params = SearchParams(candidates=500, exact_scan_below=exact_below)
                    assert search(conn, p, ALL_MARKERS_QUESTION, vec, params, mode) == [], (who, mode)
            assert fetch_ancestors(conn, p, every_id) == {}, who
        for mode in MODES:
            retriever = corpus.rag.as_retriever(p, top_k=50, options=RetrievalOptions(mode=mode))
            assert retriever.retrieve(ALL_MARKERS_QUESTION) == [], (who, mode)
        store = PgRagVectorStore(corpus.rag.db).for_principal(p)
        index = VectorStoreIndex.from_vector_store(store, embed_model=corpus.rag.providers.embed_model)
        assert index.as_retriever(similarity_top_k=50).retrieve(ALL_MARKERS_QUESTION) == [], who


def test_retrieval_without_a_principal_is_refused(corpus: Corpus) -> None:
    for bad in (None, "alice", {"user_id": "alice", "groups": ["eng"]}, ("alice", ["eng"]), 0):
        with pytest.raises(PermissionDeniedError):
            corpus.rag.retrieve("policy", user=bad)  # type: ignore[arg-type]
        with pytest.raises(PermissionDeniedError):
            corpus.rag.as_retriever(bad)  # type: ignore[arg-type]
        with pytest.raises(PermissionDeniedError):
            PermissionScopedRetriever(corpus.rag._retriever(), bad)  # type: ignore[arg-type]
    with pytest.raises(PermissionDeniedError):
        Principal(None, ["eng"])  # type: ignore[arg-type]
    with pytest.raises(PermissionDeniedError):
        Principal("x", "eng")  # type: ignore[arg-type]  # a bare string is not a list of groups


def test_user_listed_in_allowed_users_sees_exactly_their_documents(corpus: Corpus) -> None:
    for who, expected in (("alice", {"alice_only"}), ("bob_alone", {"bob_hr"}), ("bob", {"bob_hr", "eng_a", "eng_b"})):
        p = PRINCIPALS[who]
        for mode in MODES:
            nodes = corpus.rag.as_retriever(p, top_k=50, options=RetrievalOptions(mode=mode)).retrieve(
                ALL_MARKERS_QUESTION
            )
            assert set(corpus.keys(nodes)) == expected, (who, mode)
    # a group named like the user grants nothing, and the user id is not a group
    assert corpus.rag.retrieve(ALL_MARKERS_QUESTION, user=Principal("mallory", ["alice", "bob"]), top_k=50) == []


# --- hostile questions -----------------------------------------------------------------------------

HOSTILE_QUESTIONS = [
    DROP,
    INJECTION,
    "' OR '1'='1",
    "%",
    "_",
    "%%%___\\%\\_",
    "O'Brien's policy",
    "\\",
    "--",
    ";",
    '{"a":1} [1,2] ]{[',
    "foo & !bar | baz:* <-> (qux",  # tsquery syntax
    "!!! ??? ... ;;; ::: ''' \"\"\" ``` ((( )))",
    "",
    "   \n\t  ",
    "policy\x00procedure",
    "Grüße 🙂 グループ naïve café",
    "x" * 10_000,
    " ".join(f"w{i}" for i in range(2_500)),  # ~10k chars, thousands of distinct words
    ("quarterly policy procedure " + " ".join(MARKERS.values()) + " ") * 60,  # ~10k chars naming every doc
    "1e3 007 1=1 NULL true",
    "fennimark osprelon dunmorrow OR 1=1",  # markers of other users' documents
]


@pytest.mark.parametrize("who", ["eng", "alice", "mixed", "nobody", "group_0", "hr"])
def test_hostile_questions_neither_error_nor_widen_access(corpus: Corpus, who: str) -> None:
    p = PRINCIPALS[who]
    allowed = visible_keys(p)
    for question in HOSTILE_QUESTIONS:
        for mode in MODES:
            nodes = corpus.rag.as_retriever(p, top_k=50, options=RetrievalOptions(mode=mode)).retrieve(question)
            got = _assert_only_visible(corpus, p, nodes, f"hostile question {question[:40]!r} mode={mode}")
            if mode == "dense":  # dense always ranks the whole visible scope
                assert got == allowed
        store = PgRagVectorStore(corpus.rag.db).for_principal(p)
        index = VectorStoreIndex.from_vector_store(store, embed_model=corpus.rag.providers.embed_model)
        _assert_only_visible(corpus, p, index.as_retriever(similarity_top_k=20).retrieve(question), "vector store")
    with psycopg.connect(corpus.dsn) as conn:  # nothing was executed as SQL
        assert conn.execute("SELECT to_regclass('rag_nodes') IS NOT NULL").fetchone() == (True,)
        assert (
            sum(len(v) for v in corpus.nodes_of.values())
            == conn.execute("SELECT count(*) FROM rag_nodes").fetchone()[0]
        )  # type: ignore[index]


def test_principal_with_names_postgres_cannot_store_sees_nothing_and_does_not_error(corpus: Corpus) -> None:
    """NUL bytes and lone surrogates cannot be in a stored ACL: such names match nothing, quietly."""
    for p in (
        Principal("alice\x00", ["eng\x00"]),
        Principal("\ud800", ["\udfff", "eng\ud800"]),
        Principal("x", ["\x00"]),
    ):
        for mode in MODES:
            assert corpus.rag.as_retriever(p, top_k=50, options=RetrievalOptions(mode=mode)).retrieve("policy") == []
    # mixed with a real group: the real group still works, the unstorable one adds nothing
    p = Principal("alice", ["eng\x00", "hr"])
    assert set(corpus.keys(corpus.rag.retrieve(ALL_MARKERS_QUESTION, user=p, top_k=50))) == {
        "hr", "bob_hr", "alice_only",
    }  # fmt: skip
    with owner_connection(corpus.rag) as conn:
        assert fetch_ancestors(conn, Principal("x", ["eng\x00"]), sorted(corpus.nodes_of["eng_a"])) == {}


# --- property test: generated hostile group names and questions ------------------------------------

_HOSTILE_CHARS = st.one_of(
    st.sampled_from(list("'\"[]{}()%_\\-;:,.*?!|&<>=@#$^~`/+ \t\n\x00") + ["--", "/*", "*/", "::", "?|", "||"]),
    st.characters(codec="utf-8"),
)
_hostile_text = st.lists(_HOSTILE_CHARS, max_size=40).map("".join)
_group = st.one_of(_hostile_text, st.sampled_from(ALL_GROUPS + NON_MATCHING_GROUPS))


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    user_id=st.one_of(st.sampled_from(["alice", "bob", "", "nobody"]), _hostile_text),
    groups=st.lists(_group, max_size=4),
    question=st.one_of(_hostile_text, st.sampled_from([ALL_MARKERS_QUESTION, *HOSTILE_QUESTIONS[:6]])),
)
def test_property_generated_principals_and_questions_never_leak_or_error(
    corpus: Corpus, user_id: str, groups: list[str], question: str
) -> None:
    p = Principal(user_id, groups)
    allowed = visible_keys(p)
    for mode in MODES:
        nodes = corpus.rag.as_retriever(p, top_k=50, options=RetrievalOptions(mode=mode)).retrieve(question)
        got = _assert_only_visible(corpus, p, nodes, f"generated mode={mode}")
        if mode == "dense":
            assert got == allowed
    with owner_connection(corpus.rag) as conn:
        hits = search(conn, p, question, None, SearchParams(candidates=500), "text")
        _assert_hits_visible(corpus, p, hits, "generated text search")
        every_id = sorted(set().union(*corpus.nodes_of.values()))
        rows = fetch_ancestors(conn, p, every_id)
        assert {corpus.key_of[r.document_id] for r in rows.values()} == allowed


# --- filtered HNSW does not lose rows --------------------------------------------------------------

N_LEAVES = 30_000
LEAVES_PER_DOC = 20
RARE_EVERY = 100  # every 100th document is "rare": 1% of the leaves


@dataclass
class Haystack:
    dsn: str
    rare_docs: set[str]
    rare_vectors: dict[str, np.ndarray]
    data_dir: Path


@pytest.fixture(scope="module")
def haystack(server_dsn: str, tmp_path_factory: pytest.TempPathFactory, embed_model) -> Iterator[Haystack]:  # type: ignore[no-untyped-def]
    name = f"acl_hnsw_{os.getpid()}"
    dsn = create_db(server_dsn, name)
    data_dir = tmp_path_factory.mktemp("hnsw") / "data"
    rag = EnterpriseRAG(data_dir=data_dir, settings=load_settings(None, database={"dsn": dsn}), embed_model=embed_model)
    rng = np.random.default_rng(20240611)
    vectors = rng.standard_normal((N_LEAVES, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    docs: list[PreparedDocument] = []
    rare_docs: set[str] = set()
    rare_vectors: dict[str, np.ndarray] = {}
    for d in range(N_LEAVES // LEAVES_PER_DOC):
        group = "rare" if d % RARE_EVERY == 0 else "common"
        doc_id = f"hay_{d:05d}"
        record = DocumentRecord(
            document_id=doc_id, source=f"hay/{d:05d}.md", title=f"Hay {d}", version=None, status="current",
            effective_date=None, content_hash=f"hash{d}", allowed_groups=[group], allowed_users=[],
        )  # fmt: skip
        doc = PreparedDocument(record=record, chunks=[])
        for j in range(LEAVES_PER_DOC):
            i = d * LEAVES_PER_DOC + j
            node_id = f"{doc_id}_{j:02d}"
            doc.chunks.append(
                Chunk(
                    chunk_id=node_id,
                    level=0,
                    position=j,
                    text=f"widget inventory report {group} item {i}",
                    breadcrumb="",
                    is_leaf=True,
                )  # fmt: skip
            )
            doc.leaf_hashes[node_id] = f"leaf{i}"
            doc.embeddings[f"leaf{i}"] = vectors[i]
            if group == "rare":
                rare_vectors[node_id] = vectors[i]
        if group == "rare":
            rare_docs.add(doc_id)
        docs.append(doc)
    with owner_connection(rag) as conn:
        indexdef = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'rag_nodes_embedding'").fetchone()[0]  # type: ignore[index]
        conn.execute("DROP INDEX rag_nodes_embedding")  # set-up shortcut: load, then build the index once
        with conn.transaction():
            act_as_service(conn)
            write_documents(conn, docs)
        conn.execute("SET maintenance_work_mem = '256MB'")
        conn.execute(indexdef)
        conn.execute("ANALYZE rag_nodes")
        assert conn.execute("SELECT count(*) FROM rag_nodes WHERE is_leaf").fetchone() == (N_LEAVES,)
        assert conn.execute("SELECT count(*) FROM rag_nodes WHERE allowed_groups && '{rare}'").fetchone() == (
            N_LEAVES // 100,
        )
    rag.close()
    yield Haystack(dsn, rare_docs, rare_vectors, data_dir)
    drop_db(server_dsn, name)


# path -> (exact_scan_below, force the planner onto the HNSW index)
_PATHS = {"hnsw_forced": (10, True), "hnsw_planner": (10, False), "exact": (None, False), "exact_forced": (None, True)}
_FORCE_INDEX = "-c enable_seqscan=off -c enable_bitmapscan=off"


def _haystack_rag(hay: Haystack, path: str, embed_model: Any) -> EnterpriseRAG:
    exact_below, forced = _PATHS[path]
    dsn = psycopg.conninfo.make_conninfo(hay.dsn, options=_FORCE_INDEX) if forced else hay.dsn
    retrieval = {"exact_scan_below": exact_below} if exact_below is not None else {}
    settings_ = load_settings(None, database={"dsn": dsn}, retrieval=retrieval)
    return EnterpriseRAG(data_dir=hay.data_dir, settings=settings_, embed_model=embed_model)


def test_hnsw_without_iterative_scan_would_lose_rows(haystack: Haystack) -> None:
    """The control: on this data, a plain filtered HNSW scan returns far fewer than k rows."""
    rng = np.random.default_rng(7)
    q = rng.standard_normal(384)
    q /= np.linalg.norm(q)
    sql = (
        "SELECT count(*) FROM (SELECT n.node_id FROM rag_nodes n WHERE n.is_leaf AND n.allowed_groups && %s"
        " ORDER BY n.embedding <=> %s::vector LIMIT 50) s"
    )
    with psycopg.connect(haystack.dsn) as conn:
        register_vector(conn)
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET enable_bitmapscan = off")
        conn.execute("SET hnsw.iterative_scan = off")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, (["rare"], q)))
        assert "rag_nodes_embedding" in plan
        found = conn.execute(sql, (["rare"], q)).fetchone()[0]  # type: ignore[index]
    assert found < 50, "the control did not reproduce the filtered-HNSW pitfall; the test below would prove nothing"


def test_forced_path_really_uses_the_hnsw_index(haystack: Haystack) -> None:
    dsn = psycopg.conninfo.make_conninfo(haystack.dsn, options=_FORCE_INDEX)
    values = {
        "groups": ["rare"], "users": [], "qvec": np.ones(384) / np.sqrt(384), "words": ["widget"],
        "cfg": "english", "n": 50, "rrf_k": 60, "wd": 1.0, "wt": 1.0, "demote": 0.5,
    }  # fmt: skip
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + build_search_sql("dense", SearchParams()), values))
    assert "rag_nodes_embedding" in plan


@pytest.mark.parametrize("group", ["rare", "common"])
def test_bm25_half_reads_postings_through_their_index(haystack: Haystack, group: str) -> None:
    """Both ACL branches of the text half read postings by their key, one range per query lexeme, never by
    scanning the table: with or without statistics, for rare lexemes and for lexemes in every leaf."""
    with psycopg.connect(haystack.dsn, autocommit=True) as conn:
        for analyzed in (False, True):
            if analyzed:
                conn.execute("ANALYZE rag_bm25_postings")
            for words in (["item", "17", "4242", "29999"], ["widget", "inventory", "report"]):
                values = {
                    "groups": [group], "users": [], "qvec": None, "words": words, "cfg": "english", "n": 50,
                    "rrf_k": 60, "wd": 1.0, "wt": 1.0, "demote": 0.5,
                }  # fmt: skip
                for exact_below in (10, 1_000_000):  # broad branch, scoped branch
                    sql = build_search_sql("text", SearchParams(exact_scan_below=exact_below))
                    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, values))
                    where = (group, analyzed, words, exact_below, plan)
                    # an index-only range scan, or a bitmap of the same range when the table was never
                    # vacuumed (heap fetches either way): one probe of the key per lexeme
                    key = r"(Index Only Scan using|Bitmap Index Scan on) rag_bm25_postings_pkey"
                    assert re.search(key, plan), where
                    assert "Seq Scan on rag_bm25_postings" not in plan, where


@pytest.mark.parametrize("path", sorted(_PATHS))
def test_selective_acl_still_gets_exactly_k_rows(haystack: Haystack, embed_model, path: str) -> None:  # type: ignore[no-untyped-def]
    rag = _haystack_rag(haystack, path, embed_model)
    question = "widget inventory report"
    q = embed_model.get_query_embedding(question)
    # (the graph's recall is not the point here: random 384-d data is HNSW's worst case)
    ids = list(haystack.rare_vectors)
    sims = np.stack([haystack.rare_vectors[i] for i in ids]) @ np.asarray(q, dtype=np.float32)
    rare, common = Principal("rachel", ["rare"]), Principal("cy", ["common"])
    try:
        for mode in ("dense", "text", "hybrid"):  # text: BM25 postings, then the ACL (joined or checked per hit)
            for k in (5, 50):
                where = f"{path}/{mode}/k={k}"
                nodes = rag.as_retriever(rare, top_k=k, options=RetrievalOptions(mode=mode)).retrieve(question)
                assert len(nodes) == k, f"{where}: {len(nodes)} rows"
                assert {n.node.metadata["document_id"] for n in nodes} <= haystack.rare_docs, where
                assert len({n.node.node_id for n in nodes}) == k, where
                # the raw search too, asking for exactly k candidates
                params = SearchParams(candidates=k, exact_scan_below=rag.settings.retrieval.exact_scan_below)
                with owner_connection(rag) as conn:
                    hits = search(conn, rare, question, q, params, mode)  # type: ignore[arg-type]
                assert len(hits) == k, f"{where}: raw search gave {len(hits)} rows"
                assert {h.document_id for h in hits} <= haystack.rare_docs, where
                if mode == "dense" and path.startswith("exact"):  # exact means exact: the true nearest rare rows
                    assert {h.node_id for h in hits} == {ids[i] for i in np.argsort(-sims)[:k]}, where
                # a "common" principal on the same path fills k too, and never sees a rare row
                got = rag.as_retriever(common, top_k=k, options=RetrievalOptions(mode=mode)).retrieve(question)
                assert len(got) == k and not ({n.node.metadata["document_id"] for n in got} & haystack.rare_docs)
    finally:
        rag.close()


def test_ingest_refuses_huge_group(rag: EnterpriseRAG, tmp_path: Path) -> None:
    """A group name too big for the ACL index fails that file with a clear reason, not the whole batch."""
    (tmp_path / "ok.md").write_text("# Fine\n\nA normal document.\n")
    (tmp_path / "huge.md").write_text("# Huge\n\nA document with a huge group.\n")
    report = rag.ingest([tmp_path / "ok.md"], allowed_groups=["staff"])
    assert report.added and not report.failed
    report = rag.ingest([tmp_path / "huge.md"], allowed_groups=["x" * 5000])
    assert not report.added and "2048 bytes" in report.failed[0].reason
