"""The second wall probed as an insider would: SQL run in a signed read, and searches shaped to measure.

Shared by tests/security/test_wall.py (a few principals, in the default test run) and
benchmarks/leakage.py (every family at full size). Each family runs its attacks on a
:class:`~tests.security.harness.LeakCorpus` for a list of principals and returns a
:class:`Family`: how many probes it made, how many bits about forbidden rows the answers
carried, and how many forbidden rows it got back. The oracle is the corpus's generated
ACLs, or the owner's view of the store where a probe reads derived rows (terms, postings,
traces). A family never asserts, so the benchmark can count and the tests fail with details.

* ``estimates``: ``EXPLAIN`` row estimates of a right and a wrong guess at a forbidden text,
  title, term and question, after ``ANALYZE``; a pair estimated differently is one bit.
* ``mid-statement``: every row-secured table read with the principal widened by
  ``set_config`` within the same statement; rows beyond are rows its plain read lacks.
* ``term oracle``: a question of one's own rarest word and a probe word; the probe word
  occurs only in forbidden documents or nowhere, and the ranking must not tell which.
  Plain reads of the BM25 statistics must list no forbidden-only word or posting.
* ``score differential``: text and hybrid scores and ranks before and after documents the
  principals cannot read are added, and after they are deleted; any change is one bit.
* ``cross-database``: another store on the same server, reached with this store's login.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.store.scoping import READER_ROLE
from enterprise_rag.store.search import Mode, SearchParams, search
from enterprise_rag.store.traces import TraceStore
from tests.security.harness import LeakCorpus
from tests.support.acl import document_text
from tests.support.databases import owner_connection


@dataclass
class Family:
    """One probe family's tally."""

    probes: int = 0
    bits: int = 0
    rows_beyond: int = 0
    examples: list[str] | None = None

    def note(self, bits: int, rows: int, what: str) -> None:
        self.probes += 1
        self.bits += bits
        self.rows_beyond += rows
        if (bits or rows) and len(self.examples or []) < 5:
            self.examples = [*(self.examples or []), what]


def real_principals(corpus: LeakCorpus, n: int, seed: int = 1) -> list[Principal]:
    """Principals of real names (a user and 1-2 groups) that read part of the corpus, not all of it."""
    rng = random.Random(seed)
    found: list[Principal] = []
    for _ in range(50 * n):
        if len(found) == n:
            break
        p = Principal(rng.choice(corpus.users), rng.sample(corpus.groups, rng.choice([1, 1, 2])))
        if 0 < len(corpus.visible(p)) < len(corpus.docs) and p not in found:
            found.append(p)
    return found


# --- estimates ----------------------------------------------------------------------------------------


def estimate(conn: psycopg.Connection, table: str, column: str, op: str, value: str) -> float:
    """The planner's row estimate for the guess, amplified by a million-row cross join."""
    query = sql.SQL("EXPLAIN (FORMAT JSON) SELECT 1 FROM {} t, generate_series(1, 1000000) g"
                    " WHERE (t.{} {} {} OR g < 0)").format(sql.Identifier(table), sql.Identifier(column), sql.SQL(op),
                                                           sql.Literal(value))  # fmt: skip
    row = conn.execute(query).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return float(plan[0]["Plan"]["Plan Rows"])


def _lexeme(conn: psycopg.Connection, corpus: LeakCorpus, word: str) -> str:
    cfg = corpus.rag.settings.database.text_search_config
    return str(conn.execute("SELECT lexeme FROM unnest(to_tsvector(%s::regconfig, %s))", (cfg, word)).fetchone()[0])


def _wrong(value: str) -> str:
    """A near miss of ``value``: its last character changed."""
    return value[:-1] + ("a" if value[-1:] != "a" else "b")


def _guesses(owner: psycopg.Connection, corpus: LeakCorpus, p: Principal, per_principal: int, rng: random.Random,
             ) -> list[tuple[str, str, str, str, str]]:  # fmt: skip
    """(table, column, operator, right guess, wrong guess) at rows ``p`` may not read, from the owner's view."""
    forbidden = [k for k in corpus.docs if k not in corpus.visible(p)]
    doc_ids = {k: d for d, k in corpus.key_of.items()}
    out = []
    for key in rng.sample(forbidden, min(per_principal, len(forbidden))):
        doc_id, marker = doc_ids[key], corpus.docs[key].marker
        text = owner.execute("SELECT text FROM rag_nodes WHERE document_id = %s AND is_leaf ORDER BY node_id LIMIT 1",
                             (doc_id,)).fetchone()[0]  # fmt: skip
        title = owner.execute("SELECT title FROM rag_documents WHERE document_id = %s", (doc_id,)).fetchone()[0]
        lexeme = _lexeme(owner, corpus, marker)
        out += [
            ("rag_nodes", "text", "=", text, _wrong(text)),
            ("rag_nodes", "text", "<", text[:16], _wrong(text[:16])),  # a step of a prefix walk
            ("rag_documents", "title", "=", title, _wrong(title)),
            ("rag_documents", "title", "<", title[:16], _wrong(title[:16])),
            ("rag_bm25_terms", "lexeme", "=", lexeme, _wrong(lexeme)),
            ("rag_bm25_terms", "lexeme", "^@", lexeme[:-2], _wrong(lexeme[:-2])),
        ]
    others = owner.execute("SELECT question FROM rag_traces WHERE user_id <> %s LIMIT %s",
                           (p.user_id, per_principal)).fetchall()  # fmt: skip
    out += [("rag_traces", "question", "=", q, _wrong(q)) for (q,) in others if q]
    return out


def estimates(corpus: LeakCorpus, principals: list[Principal], per_principal: int = 10, seed: int = 3) -> Family:
    """Right and wrong guesses at forbidden values, estimated for a signed reader after ``ANALYZE``."""
    rng = random.Random(seed)
    traces = TraceStore(corpus.rag.db)
    for i, p in enumerate(principals):  # every principal has asked something the others must not learn
        traces.start(f"wall-estimates-{seed}-{i}", p, f"What does the severance of {p.user_id} come to, case {i}?", [])
    family = Family()
    with owner_connection(corpus.rag) as owner:
        owner.execute("ANALYZE")
        for p in principals:
            guesses = _guesses(owner, corpus, p, per_principal, rng)
            with corpus.rag.db.connection_for(p) as conn:
                for table, column, op, right, wrong in guesses:
                    differ = estimate(conn, table, column, op, right) != estimate(conn, table, column, op, wrong)
                    family.note(int(differ), 0, f"{p.user_id!r} {table}.{column} {op} {right[:40]!r}")
    return family


# --- mid-statement settings ---------------------------------------------------------------------------

_WIDEN = ("set_config('enterprise_rag.groups', %(groups)s::text[]::text, true),"
          " set_config('enterprise_rag.user_id', %(users)s::text[]::text, true)")  # fmt: skip
READS = {
    "rag_documents": "SELECT document_id FROM rag_documents",
    "rag_nodes": "SELECT node_id FROM rag_nodes",
    "rag_acl_sets": "SELECT acl_id::text FROM rag_acl_sets",
    "rag_bm25_terms": "SELECT lexeme || '/' || acl_id FROM rag_bm25_terms",
    "rag_bm25_postings": "SELECT lexeme || '/' || node_seq FROM rag_bm25_postings",
    "rag_traces": "SELECT trace_id FROM rag_traces",
    "rag_trace_steps": "SELECT trace_id || '/' || seq FROM rag_trace_steps",
    "rag_llm_calls": "SELECT trace_id || '/' || call_key FROM rag_llm_calls",
}
# The settings widened after the statement's first row (a subquery run per row), by the projection of a
# scan's first row, or in a subquery that runs before the read.
SHAPES = {
    "after the first row": "SELECT x FROM (SELECT i, ({read} WHERE i > 0 LIMIT 1 OFFSET i - 1) AS x, " + _WIDEN
                           + " FROM generate_series(1, %(rows)s) i) s",
    "between the rows of one scan": "SELECT x FROM (SELECT t.*, " + _WIDEN + " FROM ({read}) t(x)) s",
    "before the read": "SELECT unnest((SELECT array_agg(t.x) FROM ({read}) t(x))) FROM (SELECT " + _WIDEN + ") w",
}  # fmt: skip


def _rows_of(conn: psycopg.Connection, query: str, params: dict[str, object] | None = None) -> set[str]:
    return {r[0] for r in conn.execute(query, params)} - {None}


def mid_statement(corpus: LeakCorpus, principals: list[Principal]) -> Family:
    """Each principal's reads of every row-secured table with the settings widened to every name of the corpus."""
    widened: dict[str, object] = {"groups": corpus.groups, "users": corpus.users}
    family = Family()
    with owner_connection(corpus.rag) as owner:
        every = {table: _rows_of(owner, read) for table, read in READS.items()}
        trace_owner = dict(owner.execute("SELECT trace_id, user_id FROM rag_traces").fetchall())
    for p in principals:
        visible = corpus.visible(p)
        own_traces = {t for t, u in trace_owner.items() if u == p.user_id}
        readable = {
            "rag_documents": {d for d, k in corpus.key_of.items() if k in visible},
            "rag_nodes": {n for n, k in corpus.node_key.items() if k in visible},
            "rag_traces": own_traces,
            **{t: {r for r in every[t] if r.split("/")[0] in own_traces} for t in ("rag_trace_steps", "rag_llm_calls")},
        }
        with corpus.rag.db.connection_for(p) as conn:
            for table in ("rag_acl_sets", "rag_bm25_terms", "rag_bm25_postings"):  # derived rows: its plain read
                readable[table] = _rows_of(conn, READS[table])
            for table, read in READS.items():
                for shape, template in SHAPES.items():
                    with conn.transaction():
                        rows = min(len(every[table]) + 1, 200)  # the subquery per row is a scan: bounded
                        seen = _rows_of(conn, template.format(read=read), {**widened, "rows": rows})
                        raise psycopg.Rollback()
                    beyond = sorted(seen - readable[table])
                    family.note(int(bool(beyond)), len(beyond), f"{p.user_id!r} {table} {shape}: {beyond[:3]}")
    return family


# --- term oracle --------------------------------------------------------------------------------------


def _text_ranking(corpus: LeakCorpus, p: Principal, question: str, max_terms: int) -> list[tuple[str, float]]:
    params = SearchParams(candidates=10, bm25_max_terms=max_terms,
                          text_search_config=corpus.rag.settings.database.text_search_config)  # fmt: skip
    with corpus.rag.db.connection_for(p) as conn:
        return [(h.node_id, round(h.score, 12)) for h in search(conn, p, question, None, params, "text")]


def term_oracle(corpus: LeakCorpus, principals: list[Principal], per_principal: int = 10, seed: int = 5) -> Family:
    """Is a probe word in a forbidden document, or nowhere? Asked through the ranking and by plain reads."""
    rng = random.Random(seed)
    family = Family()
    with owner_connection(corpus.rag) as owner:
        lexeme_docs: dict[str, set[str]] = {}
        posting_doc: dict[str, str] = {}
        for lexeme, seq, doc_id in owner.execute(
            "SELECT p.lexeme, p.node_seq, n.document_id FROM rag_bm25_postings p JOIN rag_nodes n USING (node_seq)"
        ):
            lexeme_docs.setdefault(lexeme, set()).add(corpus.key_of[doc_id])
            posting_doc[f"{lexeme}/{seq}"] = corpus.key_of[doc_id]
        lexeme_of = {d.marker: _lexeme(owner, corpus, d.marker) for d in corpus.docs.values()}
    for p in principals:
        visible = corpus.visible(p)
        own = [corpus.docs[k].marker for k in sorted(visible)]
        forbidden = [d.marker for k, d in corpus.docs.items() if k not in visible]
        for marker in rng.sample(forbidden, min(per_principal, len(forbidden))):
            mine = rng.choice(own)
            nowhere = "zq" + "".join(rng.choice("abcdefghij") for _ in range(6)) + "x"  # markers end in k
            probe, absent = (_text_ranking(corpus, p, f"{mine} {word}", 1) for word in (marker, nowhere))
            family.note(int(probe != absent), 0, f"{p.user_id!r}: {marker} ranks as present")
        with corpus.rag.db.connection_for(p) as conn:
            terms = _rows_of(conn, "SELECT lexeme FROM rag_bm25_terms")
            postings = _rows_of(conn, READS["rag_bm25_postings"])
        forbidden_only = {lex for lex, docs in lexeme_docs.items() if not docs & visible}
        listed = sorted(terms & forbidden_only)
        family.note(int(bool(listed)), len(listed), f"{p.user_id!r} reads terms {listed[:3]}")
        beyond = sorted(r for r in postings if posting_doc.get(r) not in visible)
        family.note(int(bool(beyond)), len(beyond), f"{p.user_id!r} reads postings {beyond[:3]}")
        assert {lexeme_of[m] for m in own} <= terms, "the probe reads its own terms, or it proves nothing"
    return family


# --- score differential -------------------------------------------------------------------------------

Results = dict[tuple[int, str, Mode, int], list[tuple[str, float, int | None, int | None]]]


def _all_results(corpus: LeakCorpus, principals: list[Principal], questions: list[list[str]]) -> Results:
    embed = corpus.rag.providers.embed_model
    out: Results = {}
    for i, p in enumerate(principals):
        for question in questions[i]:
            vector = embed.get_query_embedding(question)
            for exact_below in (0, 1_000_000):  # the broad (HNSW) and the small (exact) branch
                params = SearchParams(candidates=20, exact_scan_below=exact_below,
                                      text_search_config=corpus.rag.settings.database.text_search_config)  # fmt: skip
                for mode in ("text", "hybrid"):
                    with corpus.rag.db.connection_for(p) as conn:
                        hits = search(conn, p, question, vector if mode == "hybrid" else None, params, mode)
                    out[(i, question, mode, exact_below)] = [
                        (h.node_id, round(h.score, 12), h.dense_rank, h.text_rank) for h in hits
                    ]
    return out


def score_differential(corpus: LeakCorpus, principals: list[Principal], folder: Path, added: int = 6) -> Family:
    """Documents none of the principals may read, carrying their own words, added and then deleted."""
    questions = []
    for p in principals:
        own = sorted(corpus.docs[k].marker for k in corpus.visible(p))
        questions.append([" ".join(own[:3]), f"quarterly policy procedure {own[0]}", "review board audit findings"])
    before = _all_results(corpus, principals, questions)
    folder.mkdir(parents=True, exist_ok=True)
    words = " ".join(q[0] for q in questions)  # every principal's own rarest words, in every added document
    paths = []
    for n in range(added):
        path = folder / f"hidden{n}.md"
        path.write_text(document_text(f"hidden{n}", words), encoding="utf-8")
        paths.append(path)
    report = corpus.rag.ingest(paths, allowed_groups=["wall-differential-only"])
    if report.failed or len(report.added) != added:
        raise RuntimeError(f"ingest of the added documents failed: {report.summary()}")
    family = Family()

    def compare(after: Results, when: str) -> None:
        for key, hits in before.items():
            visible = corpus.visible(principals[key[0]])
            rows = sum(1 for node_id, *_ in after[key] if corpus.node_key.get(node_id) not in visible)
            family.note(int(after[key] != hits), rows, f"{when}: {principals[key[0]].user_id!r} {key[1:]}")

    compare(_all_results(corpus, principals, questions), "added")
    for path in paths:
        corpus.rag.delete(path)
    compare(_all_results(corpus, principals, questions), "deleted")
    return family


# --- cross-database -----------------------------------------------------------------------------------


def cross_database(corpus: LeakCorpus, other: EnterpriseRAG) -> Family:
    """This store's login role against another store's database on the same server."""
    family = Family()
    other_db = psycopg.conninfo.conninfo_to_dict(other.db.dsn())["dbname"]
    with owner_connection(other) as owner:
        secret = owner.execute("SELECT text FROM rag_nodes WHERE is_leaf LIMIT 1").fetchone()[0]
        secured = "SELECT relname FROM pg_class WHERE relrowsecurity AND relnamespace = current_schema()::regnamespace"
        tables = [r[0] for r in owner.execute(secured)]
        owner.execute("ANALYZE")
    target = psycopg.conninfo.make_conninfo(corpus.rag.db.app_dsn(), dbname=other_db)
    try:
        conn = psycopg.connect(target, connect_timeout=5, autocommit=True)
    except psycopg.OperationalError as e:
        family.note(0, 0, f"connect refused: {e}")
        return family
    with conn:
        family.note(1, 0, f"connected to {other_db}")
        for role in (None, READER_ROLE):
            try:
                if role:
                    conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
                rows = sum(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(t))).fetchone()[0]
                           for t in tables)  # fmt: skip
                differ = estimate(conn, "rag_nodes", "text", "=", secret) != estimate(
                    conn, "rag_nodes", "text", "=", _wrong(secret)
                )
                family.note(int(differ), rows, f"read {other_db} as {role or 'login'}")
            except psycopg.Error as e:
                family.note(0, 0, f"{role}: {e}")
    return family

