"""The package's login role and signing key, made by the tables' owner (after the migrations).

The package never queries as the owner: it connects as a login role of its own, one per
database, that is neither superuser, owner of anything, nor ``BYPASSRLS``, and acts only
through the reader and writer roles with a signed principal (see
``enterprise_rag/sql/0007_signed_principal.sql``). The owner makes that role, its random password
and the signing key once, keeps the secrets in ``rag_secrets`` (the owner's alone), and hands
them to the process that opens the pool; they never reach a session of the login role.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import psycopg
from psycopg import sql

from enterprise_rag.errors import StoreError
from enterprise_rag.store.scoping import READER_ROLE, WRITER_ROLE

ROLE_PREFIX = "enterprise_rag_app_"


@dataclass(frozen=True)
class AppAccess:
    """How the package connects for queries and writes."""

    dsn: str
    role: str
    signing_key: bytes


def app_role_name(database: str) -> str:
    """The login role of one database (roles are cluster-wide; each store has its own)."""
    return ROLE_PREFIX + hashlib.sha256(database.encode()).hexdigest()[:16]


def _pads(key: bytes) -> tuple[bytes, bytes]:
    """HMAC-SHA256's inner and outer key pads, so the server needs no XOR of its own."""
    block = key.ljust(64, b"\0")
    return bytes(b ^ 0x36 for b in block), bytes(b ^ 0x5C for b in block)


def provision(conn: psycopg.Connection, owner_dsn: str, connection_limit: int) -> AppAccess:
    """Make (once) and return the login role, its password and the signing key, as the owner.

    The database becomes the store's own: PUBLIC loses CONNECT and TEMPORARY on it (another store's login
    role may not connect; the writer role keeps TEMPORARY for the bulk write's staging table), and the login
    role gets at most ``connection_limit`` sessions. Provisioning is serialised by a lock on ``rag_secrets``,
    a table no role but its owner may touch (an advisory lock would be one any session could hold)."""
    with conn.transaction():
        conn.execute("LOCK TABLE rag_secrets IN EXCLUSIVE MODE")
        row = conn.execute("SELECT signing_key, app_password FROM rag_secrets").fetchone()
        if row is None:
            key, password = secrets.token_bytes(32), secrets.token_hex(24)
            conn.execute(
                "INSERT INTO rag_secrets (signing_key, key_ipad, key_opad, app_password) VALUES (%s, %s, %s, %s)",
                (key, *_pads(key), password),
            )
        else:
            key, password = bytes(row[0]), str(row[1])
        database = str(conn.execute("SELECT current_database()").fetchone()[0])  # type: ignore[index]
        role = app_role_name(database)
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is not None
        verb = "ALTER" if exists else "CREATE"
        try:
            with conn.transaction():
                conn.execute(
                    sql.SQL(
                        verb + " ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT NOCREATEDB NOCREATEROLE"
                        " CONNECTION LIMIT {} PASSWORD {}"
                    ).format(sql.Identifier(role), sql.Literal(int(connection_limit)), sql.Literal(password))
                )
                conn.execute(
                    sql.SQL("GRANT {}, {} TO {}").format(
                        sql.Identifier(READER_ROLE), sql.Identifier(WRITER_ROLE), sql.Identifier(role)
                    )
                )
                db = sql.Identifier(database)
                conn.execute(sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC").format(db))
                conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, sql.Identifier(role)))
                conn.execute(sql.SQL("GRANT TEMPORARY ON DATABASE {} TO {}").format(db, sql.Identifier(WRITER_ROLE)))
        except psycopg.errors.InsufficientPrivilege as exc:
            user = conn.info.user
            raise StoreError(
                f"user {user} may not create the package's login role {role}: have an administrator run"
                f' "ALTER ROLE {user} CREATEROLE; GRANT {READER_ROLE}, {WRITER_ROLE} TO {user} WITH ADMIN OPTION",'
                f" then start again ({exc})"
            ) from exc
    dsn = psycopg.conninfo.make_conninfo(owner_dsn, user=role, password=password)
    return AppAccess(dsn=dsn, role=role, signing_key=key)
