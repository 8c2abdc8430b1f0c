"""Scratch databases on the session's embedded server, for module-scoped stores."""

from __future__ import annotations

import psycopg


def create_db(server_dsn: str, name: str) -> str:
    """A new empty database ``name`` on the server (dropped first if left over); its DSN."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(server_dsn, dbname=name)


def drop_db(server_dsn: str, name: str) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
