"""The store: migrations, schema and indexes, and the real embedded PostgreSQL + pgvector server."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest

from enterprise_rag import EnterpriseRAG, Principal, StoreError
from enterprise_rag.config import load_settings
from enterprise_rag.schema.documents import Chunk, DocumentRecord
from enterprise_rag.store import Database, apply_migrations
from enterprise_rag.store.embedded import embedded_running, stop_embedded
from enterprise_rag.store.migrate import SQL_DIR, migration_files
from enterprise_rag.store.writer import PreparedDocument, existing_embeddings, write_documents
from tests.conftest import REPO
from tests.support.databases import owner_connection


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("ENTERPRISE_RAG_"):
            monkeypatch.delenv(name)


def _env_without_overrides() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("ENTERPRISE_RAG_")}


# --- migrations on a fresh database of the session server ----------------------------------------


def test_migrations_apply_once_and_are_recorded(fresh_dsn: str) -> None:
    files = migration_files()
    with psycopg.connect(fresh_dsn) as conn:
        applied = apply_migrations(conn, 384)
        assert applied == [p.name for p in files]
        rows = conn.execute("SELECT filename, sha256, applied_at FROM rag_migrations ORDER BY filename").fetchall()
    assert [r[0] for r in rows] == [p.name for p in files]
    for (filename, digest, applied_at), path in zip(rows, files, strict=True):
        assert filename == path.name
        assert digest == hashlib.sha256(path.read_text(encoding="utf-8").encode()).hexdigest()
        assert applied_at is not None


def test_rerunning_migrations_is_a_noop(fresh_dsn: str) -> None:
    with psycopg.connect(fresh_dsn) as conn:
        assert apply_migrations(conn, 384)
        before = conn.execute("SELECT filename, sha256, applied_at FROM rag_migrations").fetchall()
        assert apply_migrations(conn, 384) == []
        assert apply_migrations(conn, 384) == []
        after = conn.execute("SELECT filename, sha256, applied_at FROM rag_migrations").fetchall()
    assert before == after
    # a second connection (another process would do the same) sees everything applied
    with psycopg.connect(fresh_dsn) as conn:
        assert apply_migrations(conn, 384) == []


def test_database_migrates_lazily_on_first_connection(fresh_dsn: str, tmp_path: Path) -> None:
    settings = load_settings(None, database={"dsn": fresh_dsn})
    db = Database(settings.database, tmp_path, 384)
    with psycopg.connect(fresh_dsn) as conn:  # the constructor touched nothing
        assert conn.execute("SELECT to_regclass('rag_migrations')").fetchone() == (None,)
    try:
        with db.connection() as conn:
            assert conn.execute("SELECT count(*) FROM rag_migrations").fetchone() == (len(migration_files()),)
        assert db.migrate() == []
    finally:
        db.close()


def test_tables_and_indexes_exist(fresh_dsn: str) -> None:
    with psycopg.connect(fresh_dsn) as conn:
        apply_migrations(conn, 384)
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()}
        indexes: dict[str, str] = dict(
            conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'").fetchall()
        )
        embedding_type = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'rag_nodes'::regclass AND attname = 'embedding'"
        ).fetchone()
        extension = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    assert {"rag_migrations", "rag_meta", "rag_documents", "rag_nodes"} <= tables
    assert embedding_type == ("vector(384)",)
    assert extension is not None

    def index_on(table: str, method: str, column: str) -> list[str]:
        return [
            name for name, definition in indexes.items() if f" ON public.{table} USING {method} ({column}" in definition
        ]

    hnsw = index_on("rag_nodes", "hnsw", "embedding")
    assert hnsw and "vector_cosine_ops" in indexes[hnsw[0]]
    assert index_on("rag_nodes", "gin", "tsv")
    assert index_on("rag_nodes", "gin", "allowed_groups")
    assert index_on("rag_nodes", "gin", "allowed_users")
    assert index_on("rag_documents", "gin", "allowed_groups")
    assert index_on("rag_documents", "gin", "allowed_users")
    assert index_on("rag_documents", "btree", "source")


def test_acl_is_required_by_the_schema(fresh_dsn: str) -> None:
    with psycopg.connect(fresh_dsn) as conn:
        apply_migrations(conn, 384)
        conn.commit()
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO rag_documents (document_id, source, content_hash) VALUES ('d', 'x.md', 'h')")


# --- vectors through pgvector's adapters (registered on every pooled connection) -----------------


def _leaf_document(key: str, vector: np.ndarray) -> PreparedDocument:
    record = DocumentRecord(
        document_id=key, source=f"vectors/{key}.md", title=key, version=None, status="current",
        effective_date=None, content_hash=key, allowed_groups=["staff"], allowed_users=[],
    )  # fmt: skip
    leaf = Chunk(f"{key}:0", 0, 0, f"text of {key}", key, is_leaf=True)
    return PreparedDocument(record, [leaf], {leaf.chunk_id: f"hash-{key}"}, {f"hash-{key}": vector})


def test_vectors_round_trip_bit_for_bit(fresh_dsn: str, tmp_path: Path) -> None:
    """Vectors go in through the binary COPY as float32 and come back with the same bits,
    as the owner and as the reader role; a float64 vector is stored as its float32 rounding."""
    rng = np.random.default_rng(5)
    sent = {
        "float32": rng.standard_normal(384).astype(np.float32),
        "float64": rng.standard_normal(384),  # more digits than float32 holds
        "tiny": np.full(384, np.float32(1e-38)) * rng.integers(1, 9, 384).astype(np.float32),  # subnormals
    }
    expected = {f"hash-{k}": np.asarray(v, dtype=np.float32) for k, v in sent.items()}
    db = Database(load_settings(None, database={"dsn": fresh_dsn}).database, tmp_path, 384)
    try:
        with db.connection() as conn:
            assert write_documents(conn, [_leaf_document(k, v) for k, v in sent.items()]) == 3
            got = existing_embeddings(conn, list(expected))
            wire = dict(conn.execute("SELECT content_hash, vector_send(embedding) FROM rag_nodes").fetchall())
            query = rng.standard_normal(384)  # a query vector, bound as a parameter
            bound = conn.execute("SELECT vector_send(%s::vector)", (query,)).fetchone()
        with db.connection_for(Principal("u", ["staff"])) as conn:
            as_reader = dict(conn.execute("SELECT content_hash, embedding FROM rag_nodes").fetchall())
    finally:
        db.close()
    assert set(got) == set(expected)
    for key, vector in expected.items():
        assert got[key].dtype == np.float32 and got[key].tobytes() == vector.tobytes(), key
        assert as_reader[key].to_numpy().tobytes() == vector.tobytes(), key
        # pgvector's own binary form: dimension, unused, big-endian float32s
        assert bytes(wire[key]) == struct.pack(">HH", 384, 0) + vector.astype(">f4").tobytes(), key
    assert bound is not None and bytes(bound[0])[4:] == query.astype(">f4").tobytes()


def test_mismatched_embedding_dimension_raises_store_error(fresh_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(fresh_dsn) as conn:
        apply_migrations(conn, 384)
    with psycopg.connect(fresh_dsn) as conn, pytest.raises(StoreError, match="384.*1536"):
        apply_migrations(conn, 1536)
    # through the public path as well: a store built for MiniLM refuses OpenAI-sized vectors
    settings = load_settings(None, database={"dsn": fresh_dsn}, embedding={"provider": "openai", "dimensions": 1536})
    rag = EnterpriseRAG(data_dir=tmp_path, settings=settings)
    try:
        with pytest.raises(StoreError, match="fresh data dir"):
            rag.status()
    finally:
        rag.close()
    # and nothing was changed by the refused attempts
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute("SELECT value FROM rag_meta WHERE key = 'embed_dim'").fetchone() == ("384",)


def test_unreachable_external_server_raises_store_error(tmp_path: Path) -> None:
    missing_socket_dir = tmp_path / "no-server-here"
    missing_socket_dir.mkdir()
    settings = load_settings(
        None, database={"dsn": f"postgresql://postgres@/postgres?host={missing_socket_dir}", "connect_timeout_s": 2}
    )
    rag = EnterpriseRAG(data_dir=tmp_path, settings=settings)
    with pytest.raises(StoreError, match="cannot connect"):
        rag.status()


def test_migration_files_are_named_and_packaged() -> None:
    assert SQL_DIR.is_dir()
    assert [p.name for p in migration_files()][0] == "0001_schema.sql"


# --- the real embedded server in a data dir of its own --------------------------------------------


@pytest.fixture(scope="module")
def own_data_dir() -> Iterator[Path]:
    """A data dir under /tmp with its own embedded server (the session server is never stopped here)."""
    path = Path(tempfile.mkdtemp(prefix="erag-store-", dir="/tmp"))
    try:
        yield path
    finally:
        stop_embedded(path)
        shutil.rmtree(path, ignore_errors=True)


def _insert_document(rag: EnterpriseRAG, document_id: str) -> None:
    with rag.db.connection() as conn:
        conn.execute(
            "INSERT INTO rag_documents (document_id, source, content_hash, allowed_groups) VALUES (%s, %s, %s, %s)",
            (document_id, f"docs/{document_id}.md", "h-" + document_id, ["all-staff"]),
        )


def _document_ids(rag: EnterpriseRAG) -> list[str]:
    with rag.db.connection() as conn:
        return [r[0] for r in conn.execute("SELECT document_id FROM rag_documents ORDER BY document_id")]


def test_embedded_status_reports_postgres_18_and_pgvector_08(own_data_dir: Path) -> None:
    with EnterpriseRAG(data_dir=own_data_dir) as rag:
        assert rag.db.embedded
        status = rag.status()
    assert status["embedded"] is True
    assert status["postgres_version"].startswith("PostgreSQL 18")
    assert status["pgvector_version"].startswith("0.8.")
    assert status["store"] == str(own_data_dir.resolve() / "pg")
    assert status["migrations"] == [p.name for p in migration_files()]
    assert status["documents"] == 0 and status["nodes"] == 0
    assert status["models"]["embedding"].startswith("local:")
    assert (own_data_dir / "pg" / "PG_VERSION").is_file()


def test_embedded_data_survives_a_server_restart(own_data_dir: Path) -> None:
    with EnterpriseRAG(data_dir=own_data_dir) as rag:
        _insert_document(rag, "restart-doc")
    assert stop_embedded(own_data_dir) is True
    assert not (own_data_dir / "pg" / "postmaster.pid").exists()
    assert stop_embedded(own_data_dir) is False  # nothing left to stop

    with EnterpriseRAG(data_dir=own_data_dir) as rag:
        assert "restart-doc" in _document_ids(rag)
        status = rag.status()
        assert status["documents"] >= 1
        assert status["migrations"] == [p.name for p in migration_files()]  # not re-applied


def test_embedded_server_gets_the_configured_buffer_cache(own_data_dir: Path) -> None:
    """shared_buffers is applied with one restart when this process starts the server, and kept after."""
    stop_embedded(own_data_dir)
    settings = load_settings(None, database={"embedded_shared_buffers_mb": 192})
    with EnterpriseRAG(data_dir=own_data_dir, settings=settings) as rag, rag.db.connection() as conn:
        assert conn.execute("SHOW shared_buffers").fetchone() == ("192MB",)
    # a server found running is not restarted under other users: the new size waits for a restart
    settings = load_settings(None, database={"embedded_shared_buffers_mb": 160})
    with EnterpriseRAG(data_dir=own_data_dir, settings=settings) as rag, owner_connection(rag) as conn:
        assert conn.execute("SHOW shared_buffers").fetchone() == ("192MB",)
        file_setting = "SELECT setting FROM pg_file_settings WHERE name = 'shared_buffers' AND applied IS NOT NULL"
        assert ("160MB",) in conn.execute(file_setting).fetchall()
    stop_embedded(own_data_dir)
    with EnterpriseRAG(data_dir=own_data_dir, settings=settings) as rag, rag.db.connection() as conn:
        assert conn.execute("SHOW shared_buffers").fetchone() == ("160MB",)


_CHILD = textwrap.dedent(
    """
    import sys
    from enterprise_rag import EnterpriseRAG
    data_dir, mode = sys.argv[1], sys.argv[2]
    with EnterpriseRAG(data_dir=data_dir) as rag:
        with rag.db.connection() as conn:
            if mode == "write":
                conn.execute(
                    "INSERT INTO rag_documents (document_id, source, content_hash, allowed_groups)"
                    " VALUES ('from-process-1', 'docs/p1.md', 'h1', ARRAY['all-staff'])"
                )
            rows = conn.execute("SELECT document_id FROM rag_documents ORDER BY 1").fetchall()
    print(",".join(r[0] for r in rows))
    """
)


def _run_child(data_dir: Path, mode: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(data_dir), mode],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=_env_without_overrides(),
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_two_processes_share_one_data_dir_one_after_the_other(own_data_dir: Path) -> None:
    stop_embedded(own_data_dir)  # the first process has to start the server itself
    assert not (own_data_dir / "pg" / "postmaster.pid").exists()

    first = _run_child(own_data_dir, "write")
    assert "from-process-1" in first.split(",")
    # the server is left running for the next process
    assert (own_data_dir / "pg" / "postmaster.pid").exists()

    second = _run_child(own_data_dir, "read")
    assert "from-process-1" in second.split(",")
    assert second == first

    # and this process sees it too
    with EnterpriseRAG(data_dir=own_data_dir) as rag:
        assert "from-process-1" in _document_ids(rag)


def test_two_processes_starting_one_new_data_dir_at_the_same_moment_both_work(own_data_dir: Path) -> None:
    """The first start configures the server and restarts it once; the second waits for that, then attaches."""
    stop_embedded(own_data_dir)
    shutil.rmtree(own_data_dir / "pg", ignore_errors=True)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(own_data_dir), mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=_env_without_overrides(),
        )  # fmt: skip
        for mode in ("write", "read")
    ]
    results = [child.communicate(timeout=180) for child in children]
    assert [c.returncode for c in children] == [0, 0], [err for _, err in results]
    assert "from-process-1" in results[0][0]


def test_stop_on_close_stops_only_a_server_it_started_and_nobody_else_uses(own_data_dir: Path) -> None:
    stop_embedded(own_data_dir)
    first = EnterpriseRAG(data_dir=own_data_dir, stop_server_on_close=True)
    first.status()  # this instance starts the server
    other = EnterpriseRAG(data_dir=own_data_dir)
    other.status()  # another user of it
    first.close()
    assert embedded_running(own_data_dir)  # left running for the other one
    assert other.status()["store"]  # and it still works
    other.close()
    again = EnterpriseRAG(data_dir=own_data_dir, stop_server_on_close=True)
    again.status()
    again.close()
    assert embedded_running(own_data_dir)  # it found the server running: not its to stop
    stop_embedded(own_data_dir)
    with EnterpriseRAG(data_dir=own_data_dir, stop_server_on_close=True) as last:
        last.status()
    assert not embedded_running(own_data_dir)


def test_the_cli_stops_what_it_started_and_stop_stops_a_running_server(own_data_dir: Path) -> None:
    stop_embedded(own_data_dir)
    cli = [sys.executable, "-m", "enterprise_rag.cli"]
    run = {"capture_output": True, "text": True, "cwd": REPO, "env": _env_without_overrides(), "timeout": 180}
    status = subprocess.run([*cli, "status", "--data-dir", str(own_data_dir)], **run)  # type: ignore[call-overload]
    assert status.returncode == 0, status.stderr
    assert not embedded_running(own_data_dir)  # a one-shot command leaves nothing running
    with EnterpriseRAG(data_dir=own_data_dir) as rag:
        rag.status()
    assert embedded_running(own_data_dir)
    stopped = subprocess.run([*cli, "stop", "--data-dir", str(own_data_dir)], **run)  # type: ignore[call-overload]
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert not embedded_running(own_data_dir)
    again = subprocess.run([*cli, "stop", "--data-dir", str(own_data_dir)], **run)  # type: ignore[call-overload]
    assert again.returncode == 0 and "no embedded PostgreSQL is running" in again.stdout


@pytest.mark.skipif(os.name == "nt" or os.geteuid() != 0, reason="only root is refused a data dir under /root")
def test_data_dir_under_root_is_refused_for_root() -> None:
    target = Path("/root") / f"erag-refused-{os.getpid()}"
    assert not target.exists()
    rag = EnterpriseRAG(data_dir=target)  # the constructor is light: nothing happens yet
    with pytest.raises(StoreError, match="/root"):
        rag.status()
    assert not target.exists()  # refused before creating anything
    with pytest.raises(StoreError, match="/root"):
        EnterpriseRAG(data_dir="/root").db.dsn()
