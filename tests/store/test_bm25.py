"""BM25 full-text search: statistics stay exact through every write path, and the ranking is BM25.

Real embedded PostgreSQL and the real local embedding model. The statistics
(``rag_acl_sets``, ``rag_bm25_terms``, ``rag_bm25_postings``, all per ACL set) are compared after
each kind of write with a recount done here in Python from the leaves' ``tsv``
text, independently of the SQL that maintains them.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from llama_index.core.schema import TextNode
from pgvector.psycopg import register_vector

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.retrieval.retriever import RetrievalOptions
from enterprise_rag.store.migrate import SQL_DIR, apply_migrations
from enterprise_rag.store.scoping import act_as_service
from enterprise_rag.store.search import SearchParams, search
from enterprise_rag.store.vector_store import PgRagVectorStore
from enterprise_rag.store.writer import rebuild_bm25_statistics, write_documents
from tests.support.databases import owner_connection

_LEXEME = re.compile(r"'((?:[^']|'')*)'(?::([0-9A-D,]+))?")

STAFF = Principal("sam", ["staff"])


def _parse_tsv(text: str) -> dict[str, tuple[int, int]]:
    """``tsvector::text`` -> lexeme -> (occurrences weighted A, other occurrences)."""
    out: dict[str, tuple[int, int]] = {}
    for lexeme, positions in _LEXEME.findall(text):
        lexeme = lexeme.replace("''", "'")
        if not positions:
            out[lexeme] = (0, 1)
            continue
        marks = positions.split(",")
        a = sum(1 for p in marks if p.endswith("A"))
        out[lexeme] = (a, len(marks) - a)
    return out


Acl = tuple[tuple[str, ...], tuple[str, ...]]
Stats = tuple[dict[Acl, tuple[int, int]], dict[tuple[str, Acl], int], dict[tuple[str, int], tuple[Acl, int, int, int]]]


def _recount(conn: psycopg.Connection) -> Stats:
    """Per ACL set (leaves, total length), df per (lexeme, set) and postings, recounted in Python."""
    sets: dict[Acl, tuple[int, int]] = {}
    df: Counter[tuple[str, Acl]] = Counter()
    postings: dict[tuple[str, int], tuple[Acl, int, int, int]] = {}
    rows = conn.execute("SELECT node_seq, tsv::text, allowed_groups, allowed_users FROM rag_nodes WHERE is_leaf")
    for node_seq, tsv, groups, users in rows:
        acl = (tuple(groups), tuple(users))
        terms = _parse_tsv(tsv)
        length = sum(a + b for a, b in terms.values())
        leaves, total = sets.get(acl, (0, 0))
        sets[acl] = (leaves + 1, total + length)
        for lexeme, (a, b) in terms.items():
            df[(lexeme, acl)] += 1
            postings[(lexeme, node_seq)] = (acl, a, b, length)
    return sets, dict(df), postings


def _stored(conn: psycopg.Connection) -> Stats:
    sets = {
        r[0]: (r[1], r[2], (tuple(r[3]), tuple(r[4])))
        for r in conn.execute("SELECT acl_id, leaves, total_length, allowed_groups, allowed_users FROM rag_acl_sets")
    }
    terms = conn.execute("SELECT lexeme, acl_id, df FROM rag_bm25_terms")
    df = {(lexeme, sets[acl_id][2]): n for lexeme, acl_id, n in terms}
    postings = {
        (r[0], r[1]): (sets[r[2]][2], r[3], r[4], r[5])
        for r in conn.execute("SELECT lexeme, node_seq, acl_id, tf_a, tf_b, length FROM rag_bm25_postings")
    }
    return {acl: (int(n), int(total)) for n, total, acl in sets.values()}, df, postings


def _assert_exact(dsn: str, where: str) -> None:
    with psycopg.connect(dsn) as conn:
        want, got = _recount(conn), _stored(conn)
    assert got[0] == want[0], f"{where}: leaves/total length per ACL set {got[0]} != recount {want[0]}"
    assert got[1] == want[1], f"{where}: document frequencies differ from the recount"
    assert got[2] == want[2], f"{where}: postings differ from the recount"
    assert 0 not in got[1].values(), f"{where}: a zero document frequency was kept"


def _md(title: str, body: str) -> str:
    return f"---\ntitle: {title}\nallowed_groups: [staff]\n---\n\n# {title}\n\n{body}\n"


def test_statistics_equal_a_fresh_recount_after_every_kind_of_write(
    rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    texts = {
        "alpha": _md("Alpha policy", "The refund policy covers annual plans. Refunds take thirty days.\n\n"
                     "## Exceptions\n\nGift cards are never refunded; disputes wait for the card network."),
        "beta": _md("Beta guide", "Travel bookings go through the travel desk fourteen days ahead."),
        "gamma": _md("Gamma notes", "Quarterly audits of the policy go to the review board."),
    }  # fmt: skip
    for name, text in texts.items():
        (docs / f"{name}.md").write_text(text, encoding="utf-8")
    rag.db.migrate()
    _assert_exact(fresh_dsn, "empty store")

    assert len(rag.ingest(docs).added) == 3  # COPY of new nodes
    _assert_exact(fresh_dsn, "after add")
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute("SELECT sum(leaves) FROM rag_acl_sets").fetchone()[0] > 3  # type: ignore[index]

    # replace: the writer deletes the old nodes and copies the new ones in one transaction
    (docs / "alpha.md").write_text(texts["alpha"].replace("thirty days", "fourteen zanzibarine days"), "utf-8")
    assert len(rag.ingest(docs).updated) == 1
    _assert_exact(fresh_dsn, "after replace")
    assert len(rag.ingest(docs).unchanged) == 3
    _assert_exact(fresh_dsn, "after an unchanged re-ingest")

    # an ACL-only change rewrites the nodes with the same text
    assert len(rag.ingest(docs / "beta.md", allowed_groups=["staff", "travel"]).updated) == 1
    _assert_exact(fresh_dsn, "after an ACL change")

    # delete through the API (nodes first, then the document)
    assert rag.delete(docs / "gamma.md")
    _assert_exact(fresh_dsn, "after delete")

    with psycopg.connect(fresh_dsn) as conn:
        # delete through the ON DELETE CASCADE from rag_documents
        beta = conn.execute("SELECT document_id FROM rag_documents WHERE source LIKE '%%beta.md'").fetchone()[0]  # type: ignore[index]
        conn.execute("DELETE FROM rag_documents WHERE document_id = %s", (beta,))
        conn.commit()
        _assert_exact(fresh_dsn, "after a cascaded delete")
        # raw SQL: a text update of one leaf, an update that changes no text, a leaf turned into a non-leaf
        conn.execute(
            "UPDATE rag_nodes SET text = text || ' zanzibarine quokka' WHERE node_id ="
            " (SELECT node_id FROM rag_nodes WHERE is_leaf ORDER BY node_id LIMIT 1)"
        )
        conn.commit()
        _assert_exact(fresh_dsn, "after a text update")
        conn.execute("UPDATE rag_nodes SET allowed_groups = allowed_groups || '{extra}'::text[]")
        conn.commit()
        _assert_exact(fresh_dsn, "after an ACL update")
        stats_xmin = conn.execute("SELECT array_agg(xmin::text ORDER BY acl_id) FROM rag_acl_sets").fetchone()
        conn.execute("UPDATE rag_nodes SET status = 'superseded'")
        # an update that changes neither text nor ACL touches no statistics (and takes no lock on them)
        locks = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE relation = 'rag_acl_sets'::regclass AND pid = pg_backend_pid()"
            " AND mode = 'ShareRowExclusiveLock'"
        ).fetchone()
        assert locks == (0,)
        conn.commit()
        assert conn.execute("SELECT array_agg(xmin::text ORDER BY acl_id) FROM rag_acl_sets").fetchone() == stats_xmin
        _assert_exact(fresh_dsn, "after a status update")
        conn.execute(
            "UPDATE rag_nodes SET is_leaf = false WHERE node_id ="
            " (SELECT node_id FROM rag_nodes WHERE is_leaf ORDER BY node_id DESC LIMIT 1)"
        )
        conn.commit()
        _assert_exact(fresh_dsn, "after a leaf became a parent")
        # a rolled-back write leaves the statistics as they were
        before = _stored(conn)
        conn.execute("DELETE FROM rag_nodes")
        assert _stored(conn) == ({}, {}, {})
        conn.rollback()
        assert _stored(conn) == before
    # the remaining document comes back whole, then the repair recount changes nothing
    assert len(rag.ingest(docs).added) == 2
    _assert_exact(fresh_dsn, "after re-adding")
    with psycopg.connect(fresh_dsn) as conn:
        before = _stored(conn)
        rebuild_bm25_statistics(conn)
        assert _stored(conn) == before
        conn.execute("TRUNCATE rag_documents CASCADE")
        conn.commit()
    _assert_exact(fresh_dsn, "after truncate")
    with psycopg.connect(fresh_dsn) as conn:
        assert _stored(conn) == ({}, {}, {})


def test_migration_backfills_an_existing_store(fresh_dsn: str, tmp_path: Path, embed_model) -> None:  # type: ignore[no-untyped-def]
    """A store built before 0003_bm25.sql gets exact statistics when the migration applies."""
    old = tmp_path / "sql_before_bm25"
    old.mkdir()
    for path in sorted(SQL_DIR.glob("*.sql")):
        if path.name < "0003":
            (old / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    with psycopg.connect(fresh_dsn) as conn:
        apply_migrations(conn, 384, sql_dir=old)
        conn.execute(
            "INSERT INTO rag_documents (document_id, source, content_hash, allowed_groups)"
            " VALUES ('d', 'd.md', 'h', '{staff}')"
        )
        conn.execute(
            "INSERT INTO rag_nodes (node_id, document_id, level, is_leaf, position, text, breadcrumb, content_hash,"
            " allowed_groups, allowed_users) SELECT 'n' || i, 'd', 0, i < 4, i, 'policy number ' || i || ' of the'"
            " || repeat(' refund', i), 'Refund policy', 'h' || i, '{staff}', '{}' FROM generate_series(0, 5) i"
        )
        conn.commit()
        assert conn.execute("SELECT to_regclass('rag_bm25_terms')").fetchone() == (None,)
        assert apply_migrations(conn, 384)[:1] == ["0003_bm25.sql"]  # (later migrations follow it)
    _assert_exact(fresh_dsn, "after the backfill")
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute("SELECT allowed_groups, allowed_users, leaves FROM rag_acl_sets").fetchall() == [
            (["staff"], [], 4)
        ]
        assert conn.execute("SELECT df FROM rag_bm25_terms WHERE lexeme = 'refund'").fetchone() == (4,)


# --- ranking ---------------------------------------------------------------------------------------


@pytest.fixture
def ranked_rag(fresh_dsn: str, tmp_path: Path, embed_model) -> EnterpriseRAG:  # type: ignore[no-untyped-def]
    settings = load_settings(None, database={"dsn": fresh_dsn})
    return EnterpriseRAG(data_dir=tmp_path / "data", settings=settings, embed_model=embed_model)


def _text_hits(rag: EnterpriseRAG, question: str, principal: Principal = STAFF, **params: object) -> list[str]:
    with owner_connection(rag) as conn:
        hits = search(conn, principal, question, None, SearchParams(candidates=100, **params), "text")  # type: ignore[arg-type]
    return [h.metadata["document_id"] for h in hits]


def test_a_rare_term_outranks_a_common_one(ranked_rag: EnterpriseRAG, tmp_path: Path) -> None:
    """ts_rank over an OR query let a leaf full of a common word win; BM25's IDF does not."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(12):  # "policy" everywhere, repeated
        body = f"Policy {i}: the policy says the policy applies. " + "Policy policy policy. " * 3
        (docs / f"common{i}.md").write_text(_md(f"Note {i}", body), encoding="utf-8")
    (docs / "rare.md").write_text(
        _md("Memo", "One line mentions the quokkanomics review, among other business of the week."), "utf-8"
    )
    assert not ranked_rag.ingest(docs).failed
    with owner_connection(ranked_rag) as conn:
        rare_id = conn.execute("SELECT document_id FROM rag_documents WHERE source LIKE '%%rare.md'").fetchone()[0]  # type: ignore[index]
        # the old ranking (ts_rank, no IDF) puts a common-word leaf first: the regression this guards
        old_top = conn.execute(
            "SELECT document_id FROM rag_nodes WHERE is_leaf AND tsv @@ to_tsquery('english', 'policy | quokkanomics')"
            " ORDER BY ts_rank(tsv, to_tsquery('english', 'policy | quokkanomics'), 1) DESC LIMIT 1"
        ).fetchone()[0]  # type: ignore[index]
    assert old_top != rare_id
    question = "What does the policy say about quokkanomics?"
    for exact_below in (0, 1_000_000):  # both ACL paths of the text half
        assert _text_hits(ranked_rag, question, exact_scan_below=exact_below)[0] == rare_id
    # through the retriever, text only and hybrid
    for mode in ("text", "hybrid"):
        nodes = ranked_rag.as_retriever(STAFF, top_k=3, options=RetrievalOptions(mode=mode)).retrieve(question)
        assert nodes[0].node.metadata["document_id"] == rare_id, mode


def test_text_ranking_is_bm25_with_lucene_idf(ranked_rag: EnterpriseRAG, tmp_path: Path) -> None:
    """The text half's order equals BM25 computed here from the leaves' tsvectors and the formula."""
    docs = tmp_path / "docs"
    docs.mkdir()
    bodies = [
        "Solar panels convert sunlight. Solar output drops in winter.",
        "Wind turbines and solar panels share the grid; storage smooths the output of wind.",
        "Battery storage holds solar energy for the night, and storage costs keep falling each year now.",
        "A very long note about the grid, the grid operator, grid tariffs, grid outages, the weather and"
        " much else besides, mentioning solar only once near its end after many other words about grids.",
        "Hydro dams store water; pumped hydro is the oldest storage.",
        "Nothing here about energy at all, only gardening and the weather.",
    ]
    for i, body in enumerate(bodies):
        (docs / f"e{i}.md").write_text(_md(f"Energy {i}", body), encoding="utf-8")
    assert not ranked_rag.ingest(docs).failed
    question = "solar storage grid"
    k1, b = 1.2, 0.75
    with owner_connection(ranked_rag) as conn:
        q_lexemes = [r[0] for r in conn.execute("SELECT lexeme FROM unnest(to_tsvector('english', %s))", (question,))]
        rows = conn.execute("SELECT document_id, node_seq, tsv::text FROM rag_nodes WHERE is_leaf").fetchall()
    leaves = [(doc, seq, _parse_tsv(tsv)) for doc, seq, tsv in rows]
    n = len(leaves)
    lengths = {seq: sum(a + b_ for a, b_ in terms.values()) for _, seq, terms in leaves}
    avgdl = sum(lengths.values()) / n
    df = Counter(lex for _, _, terms in leaves for lex in terms)
    scored = []
    for doc, seq, terms in leaves:
        score = 0.0
        for lex in q_lexemes:
            if lex in terms:
                tf = sum(terms[lex])
                idf = math.log(1 + (n - df[lex] + 0.5) / (df[lex] + 0.5))
                score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[seq] / avgdl))
        if score > 0:
            scored.append((-score, seq, doc))
    expected = [doc for _, _, doc in sorted(scored)]
    with owner_connection(ranked_rag) as conn:
        for exact_below in (0, 1_000_000):
            hits = search(
                conn, STAFF, question, None, SearchParams(candidates=100, exact_scan_below=exact_below), "text"
            )
            assert [h.metadata["document_id"] for h in hits] == expected, exact_below
            assert [h.text_rank for h in hits] == list(range(1, len(expected) + 1))


def test_title_boost_and_term_bound(ranked_rag: EnterpriseRAG, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "in_title.md").write_text(_md("Pelican handbook", "How the team works, week by week."), "utf-8")
    (docs / "in_body.md").write_text(_md("Crew handbook", "How the pelican team works, week by week."), "utf-8")
    (docs / "other.md").write_text(_md("Crew notes", "How the team plans, week by week."), "utf-8")
    assert not ranked_rag.ingest(docs).failed
    with owner_connection(ranked_rag) as conn:
        ids = dict(conn.execute("SELECT regexp_replace(source, '.*/', ''), document_id FROM rag_documents").fetchall())
    # a word in the title (breadcrumb, weight A) counts title_boost times
    assert _text_hits(ranked_rag, "pelican", bm25_title_boost=3.0) == [ids["in_title.md"], ids["in_body.md"]]
    assert _text_hits(ranked_rag, "pelican", bm25_title_boost=0.0) == [ids["in_body.md"]]
    # only the highest-IDF lexemes are searched: with one allowed, "team" (in every leaf) is dropped
    assert set(_text_hits(ranked_rag, "team pelican")) == set(ids.values())
    assert set(_text_hits(ranked_rag, "team pelican", bm25_max_terms=1)) == {ids["in_title.md"], ids["in_body.md"]}


def test_text_half_respects_the_acl_on_both_paths(ranked_rag: EnterpriseRAG, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "open.md").write_text(_md("Open", "The walrus budget is public."), "utf-8")
    (docs / "secret.md").write_text(
        "---\ntitle: Secret\nallowed_groups: [finance]\n---\n\n# Secret\n\nThe walrus budget walrus reserve.\n", "utf-8"
    )
    assert not ranked_rag.ingest(docs).failed
    with owner_connection(ranked_rag) as conn:
        ids = dict(conn.execute("SELECT regexp_replace(source, '.*/', ''), document_id FROM rag_documents").fetchall())
    for exact_below in (0, 1_000_000):
        assert _text_hits(ranked_rag, "walrus reserve", STAFF, exact_scan_below=exact_below) == [ids["open.md"]]
        fin = _text_hits(ranked_rag, "walrus reserve", Principal("f", ["finance"]), exact_scan_below=exact_below)
        assert fin == [ids["secret.md"]]
        assert _text_hits(ranked_rag, "walrus reserve", Principal("x", ["nobody"]), exact_scan_below=exact_below) == []


def _index_oids(conn: psycopg.Connection) -> dict[str, tuple[int, str]]:
    """rag_nodes' indexes: name -> (oid, definition); a rebuilt index keeps its definition, not its oid."""
    rows = conn.execute(
        "SELECT c.relname, c.oid::int, pg_get_indexdef(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = 'rag_nodes'::regclass"
    )
    return {name: (oid, definition) for name, oid, definition in rows}


def _user_triggers(conn: psycopg.Connection) -> dict[str, str]:
    rows = conn.execute(
        "SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'rag_nodes'::regclass AND NOT tgisinternal"
    )
    return dict(rows.fetchall())


def test_writes_keep_the_indexes_and_triggers_and_the_statistics_exact(
    rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path
) -> None:
    """Every write, into an empty store or a larger one, keeps the indexes (same oids) and the
    triggers on, and the triggers leave the statistics exact; a failed write changes nothing."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "alpha.md").write_text(_md("Alpha policy", "Refunds of annual plans take thirty days."), "utf-8")
    (docs / "beta.md").write_text(_md("Beta guide", "Travel bookings go through the travel desk."), "utf-8")
    rag.db.migrate()
    with psycopg.connect(fresh_dsn) as conn:
        before, triggers = _index_oids(conn), _user_triggers(conn)
    assert set(triggers.values()) == {"O"}
    assert len(rag.ingest(docs).added) == 2  # into the empty store
    _assert_exact(fresh_dsn, "after the first write")
    (docs / "gamma.md").write_text(_md("Gamma", "Audits go to the board."), "utf-8")
    assert len(rag.ingest(docs / "gamma.md").added) == 1  # a small batch into a larger store
    _assert_exact(fresh_dsn, "after a second write")
    with psycopg.connect(fresh_dsn) as conn:
        assert _index_oids(conn) == before and _user_triggers(conn) == triggers
    hits = rag.retrieve("annual plan refund", user=STAFF, top_k=1)
    assert "thirty days" in hits[0].node.get_content()

    bad = TextNode(id_="bad", text="wrong dimension", embedding=[0.1] * 7, metadata={"allowed_groups": ["staff"]})
    prepared = PgRagVectorStore(rag.db)._prepare("bad-doc", [bad])
    with psycopg.connect(fresh_dsn) as conn:
        register_vector(conn)
        stats = _stored(conn)
        act_as_service(conn)
        with pytest.raises(psycopg.errors.DataException):
            write_documents(conn, [prepared])
        conn.rollback()
        assert _index_oids(conn) == before and _user_triggers(conn) == triggers and _stored(conn) == stats


def _constraints(conn: psycopg.Connection) -> dict[str, str]:
    rows = conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid IN ('rag_bm25_postings'::regclass, 'rag_bm25_terms'::regclass)"
    )
    return dict(rows.fetchall())


def test_rebuild_equals_the_trigger_maintained_statistics(
    rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path
) -> None:
    """rag_bm25_rebuild() (one pass, 0013) gives exactly what the triggers maintain, keys included."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "alpha.md").write_text(
        _md("Alpha refund policy", "Refunds of annual plans take thirty days.\n\n## Refund exceptions\n\n"
            "Refunds of refunds are never refunded; gift cards are not refunded."), "utf-8")  # fmt: skip
    (docs / "beta.md").write_text(_md("Beta guide", "Travel bookings go through the travel desk."), "utf-8")
    assert len(rag.ingest(docs).added) == 2
    rag.ingest(docs / "beta.md", allowed_groups=["staff", "travel"], allowed_users=["ann"])
    with psycopg.connect(fresh_dsn) as conn:
        # leaves the parser gives odd vectors: stop words only (empty tsv), a breadcrumb only, one long repeat
        conn.execute(
            "INSERT INTO rag_nodes (node_id, document_id, level, is_leaf, position, text, breadcrumb, content_hash,"
            " allowed_groups, allowed_users) SELECT 'raw' || t.i, d.document_id, 2, true, 100 + t.i, t.body, t.crumb,"
            " 'raw' || t.i, '{staff}', '{bob,ann}' FROM (SELECT min(document_id) AS document_id FROM rag_documents) d,"
            " (VALUES (1, 'the of and a', ''), (2, '', 'Refund policy > Refunds'),"
            "  (3, repeat('refund ', 300), 'Refund')) AS t(i, body, crumb)"
        )
        conn.commit()
        assert conn.execute("SELECT count(*) FROM rag_nodes WHERE is_leaf AND length(tsv) = 0").fetchone() == (1,)
        maintained, constraints = _stored(conn), _constraints(conn)
        rebuild_bm25_statistics(conn)
        assert _stored(conn) == maintained
        assert _constraints(conn) == constraints
        conn.rollback()
    _assert_exact(fresh_dsn, "after the rebuild")
