"""A small migrator: applies ``enterprise_rag/sql/NNNN_*.sql`` in order, once each, and records them.

The pending files run in one transaction that holds an EXCLUSIVE lock on ``rag_migrations``, so two
processes starting together do not race. No session of the package's login role can take or hold a lock
that conflicts with it (its roles may only read that table); an advisory lock, which any session may
hold, serialises only the creation of ``rag_migrations`` in a new database, before any login role exists.
Re-running is a no-op. No DDL runs at query time.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

import psycopg

from enterprise_rag.errors import StoreError

logger = logging.getLogger(__name__)

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
_NAME = re.compile(r"^\d{4}_[a-z0-9_]+\.sql$")
_LOCK_KEY = 7_340_112_001  # advisory lock id: the creation of rag_migrations in a new database


def migration_files(sql_dir: Path = SQL_DIR) -> list[Path]:
    """The migration files in apply order."""
    files = sorted(p for p in sql_dir.glob("*.sql") if _NAME.match(p.name))
    if not files:
        raise StoreError(f"no migration files found in {sql_dir}")
    return files


def apply_migrations(
    conn: psycopg.Connection,
    embed_dim: int,
    text_search_config: str = "english",
    sql_dir: Path = SQL_DIR,
) -> list[str]:
    """Apply pending migrations; return the names applied now (empty when up to date)."""
    applied_now: list[str] = []
    with conn.transaction():
        if conn.execute("SELECT to_regclass('rag_migrations') IS NULL").fetchone() == (True,):
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))  # a new database: no login role yet
            conn.execute(
                "CREATE TABLE IF NOT EXISTS rag_migrations ("
                " filename text PRIMARY KEY, sha256 text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
        conn.execute("LOCK TABLE rag_migrations IN EXCLUSIVE MODE")
        done = {row[0]: row[1] for row in conn.execute("SELECT filename, sha256 FROM rag_migrations")}
        for path in migration_files(sql_dir):
            text = path.read_text(encoding="utf-8")
            digest = hashlib.sha256(text.encode()).hexdigest()
            if path.name in done:
                if done[path.name] != digest:
                    logger.warning("migration %s changed after it was applied; not re-applied", path.name)
                continue
            sql = text.replace("${EMBED_DIM}", str(int(embed_dim)))
            sql = sql.replace("${TEXT_SEARCH_CONFIG}", _identifier(text_search_config))
            try:
                conn.execute(sql.encode())
            except psycopg.Error as exc:
                raise StoreError(f"migration {path.name} failed: {exc}") from exc
            conn.execute("INSERT INTO rag_migrations (filename, sha256) VALUES (%s, %s)", (path.name, digest))
            applied_now.append(path.name)
            logger.info("applied migration %s", path.name)
        _check_meta(conn, "embed_dim", str(embed_dim), "embedding dimension")
        _check_meta(conn, "text_search_config", text_search_config, "text search configuration")
    return applied_now


def _identifier(name: str) -> str:
    """A text search configuration name, validated because it is pasted into DDL."""
    if not re.fullmatch(r"[a-z_]+", name):
        raise StoreError(f"invalid text search configuration name: {name!r}")
    return name


def _check_meta(conn: psycopg.Connection, key: str, value: str, what: str) -> None:
    """Record a schema-shaping setting on first run; refuse a store built with another value."""
    conn.execute("INSERT INTO rag_meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING", (key, value))
    row = conn.execute("SELECT value FROM rag_meta WHERE key = %s", (key,)).fetchone()
    if row is not None and row[0] != value:
        raise StoreError(
            f"this store was created with {what} {row[0]!r} but the configuration says {value!r}; "
            "use a fresh data dir / database, or configure the original value"
        )
