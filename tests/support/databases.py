"""Scratch databases on the session's embedded server, for module-scoped stores."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from enterprise_rag import EnterpriseRAG
from enterprise_rag.store.credentials import app_role_name


def create_db(server_dsn: str, name: str) -> str:
    """A new empty database ``name`` on the server (dropped first if left over); its DSN."""
    drop_db(server_dsn, name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(server_dsn, dbname=name)


def drop_db(server_dsn: str, name: str) -> None:
    """Drop the database and the package's login role of it."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(app_role_name(name))))


@contextmanager
def owner_connection(rag: EnterpriseRAG) -> Iterator[psycopg.Connection]:
    """A connection of the tables' owner, in autocommit: its own statements see every row (ground
    truth for a test), and each ``read_as`` block on it is a transaction of its own."""
    rag.status()  # the store is open: migrated, its signing key made
    with psycopg.connect(rag.db.dsn(), autocommit=True) as conn:
        register_vector(conn)
        yield conn
