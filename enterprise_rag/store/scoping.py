"""Who a transaction acts for, signed so that SQL in the session cannot change it.

The second wall behind the ACL predicates in our SQL (``enterprise_rag/sql/0004_row_security.sql``,
``0007_signed_principal.sql``, ``0011_principal_per_statement.sql``). Every transaction of the
package states who it acts for:

* :func:`read_as` -- a read for one user, as ``enterprise_rag_reader``: the policies show
  only rows the principal may read. The block is its own transaction and is rolled back.
* :func:`act_as_service` -- the package's own work (writes, corpus-wide reads), as
  ``enterprise_rag_writer``; :class:`~enterprise_rag.store.database.Database` opens every
  pooled transaction this way.

The role and the settings are transaction-local, and ``enterprise_rag.sig`` is an HMAC over
them, the backend pid and the transaction's start time, made here with a key that no session
can read (``rag_secrets``, the owner's). SQL run later in the transaction can change the
settings or the role but not sign them again, and a signature is worth nothing in another
transaction: a forged or replayed principal reads no row. The policies read the signed principal
once per statement, so a change within a statement reaches none of its rows.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from enterprise_rag.errors import StoreError
from enterprise_rag.principal import Principal, storable_name

READER_ROLE = "enterprise_rag_reader"
WRITER_ROLE = "enterprise_rag_writer"

# Every value is bound. The lists are sent as text[] and cast to text in SQL, so PostgreSQL's own
# array output quotes them; the policies cast them back. What is signed is the text the settings
# hold, read back in the same statement, so both sides sign exactly the same bytes.
_STATE_SQL = (
    "SELECT set_config('role', %(role)s, true), set_config('enterprise_rag.kind', %(kind)s, true),"
    " set_config('enterprise_rag.user_id', %(user_id)s::text[]::text, true),"
    " set_config('enterprise_rag.groups', %(groups)s::text[]::text, true),"
    " pg_backend_pid()::text, (extract(epoch FROM transaction_timestamp()) * 1000000)::bigint::text"
)
_SIGN_SQL = "SELECT set_config('enterprise_rag.sig', %s, true)"


class AppConnection(psycopg.Connection):  # type: ignore[type-arg]
    """A pooled connection of the package's login role; it carries the signing key (never sent)."""

    signing_key: bytes = b""
    scoped_to: Principal | None = None  # set inside read_as


def principal_settings(principal: Principal) -> dict[str, object]:
    """The bound values that set ``principal`` for the policies.

    The user id goes in exactly (trace owners are matched exactly; an empty id matches no
    document ACL, as in :attr:`Principal.users`). Names PostgreSQL cannot store are left out:
    no stored row can carry them, so leaving them out never hides a readable row.
    """
    return {
        "role": READER_ROLE,
        "kind": "principal",
        "user_id": [principal.user_id] if storable_name(principal.user_id) else [],
        "groups": [g for g in principal.groups if storable_name(g)],
    }


SERVICE_SETTINGS: dict[str, object] = {"role": WRITER_ROLE, "kind": "service", "user_id": [], "groups": []}


def acl_values(principal: Principal) -> dict[str, list[str]]:
    """The principal's groups and user ids as bound ACL parameters.

    Names PostgreSQL cannot store (a NUL byte, a lone surrogate) are dropped:
    no stored ACL can contain them, so they match nothing, and sending them
    would only fail in the driver. Dropping a name never widens access.
    """
    return {
        "groups": [g for g in principal.groups if storable_name(g)],
        "users": [u for u in principal.users if storable_name(u)],
    }


def _signing_key(conn: psycopg.Connection) -> bytes:
    """The key of an :class:`AppConnection`; on the owner's own connection, read from ``rag_secrets``."""
    key = getattr(conn, "signing_key", b"")
    if not key:
        row = conn.execute("SELECT signing_key FROM rag_secrets").fetchone()
        if row is None:
            raise StoreError("the store has no signing key yet: open it once through EnterpriseRAG")
        key = bytes(row[0])
    return bytes(key)


def _sign(conn: psycopg.Connection, values: dict[str, object]) -> None:
    """Set and sign who the current transaction acts for."""
    key = _signing_key(conn)
    row = conn.execute(_STATE_SQL, values).fetchone()
    assert row is not None
    _, kind, user_id, groups, pid, started = row
    message = "\x1f".join([str(kind), str(user_id), str(groups), str(pid), str(started)]).encode()
    conn.execute(_SIGN_SQL, (hmac.new(key, message, hashlib.sha256).hexdigest(),))


def act_as_service(conn: psycopg.Connection) -> None:
    """Make the open (or next) transaction the package's own work, as the writer role."""
    _sign(conn, SERVICE_SETTINGS)


@contextmanager
def read_as(conn: psycopg.Connection, principal: Principal) -> Iterator[None]:
    """Run the block's statements as the reader role, for ``principal``, in a transaction of their own
    that is rolled back at the end.

    Inside a block already scoped to the same principal it adds nothing. It never nests in another
    open transaction: rolled back to a savepoint, SQL in the block would be back in that
    transaction's role and rights.
    """
    if getattr(conn, "scoped_to", None) == principal:
        yield
        return
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise StoreError("a read for a user needs a transaction of its own: use Database.connection_for(user)")
    with conn.transaction() as tx:
        _sign(conn, principal_settings(principal))
        if isinstance(conn, AppConnection):
            conn.scoped_to = principal
        try:
            yield
        finally:
            if isinstance(conn, AppConnection):
                conn.scoped_to = None
        raise psycopg.Rollback(tx)
