"""Reads made for a user run as a row-level-security-bound role with the principal set.

The second wall behind the ACL predicates in our SQL (``enterprise_rag/sql/0004_row_security.sql``):
inside :func:`read_as` the connection acts as ``enterprise_rag_reader``, a role
without BYPASSRLS, and the policies show it only rows the principal may read. So a
query that lost its ACL predicate still cannot return another user's passage.

The role and the principal are transaction-local settings, and the block's
transaction (or savepoint, inside a caller's transaction) is rolled back at the
end: they never outlive the block, and a pooled connection always goes back as
the owner. Blocks are therefore read-only; writes keep running as the owner.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from enterprise_rag.principal import Principal, storable_name

READER_ROLE = "enterprise_rag_reader"

# Every value is bound. The lists are sent as text[] and cast to text in SQL, so PostgreSQL's own
# array output quotes them; the policies cast them back. No name is ever pasted into a statement.
_ENTER_SQL = (
    "SELECT set_config('role', %(role)s, true),"
    " set_config('enterprise_rag.user_id', %(user_id)s::text[]::text, true),"
    " set_config('enterprise_rag.groups', %(groups)s::text[]::text, true)"
)


def principal_settings(principal: Principal) -> dict[str, object]:
    """The bound values that set ``principal`` for the policies.

    The user id goes in exactly (trace owners are matched exactly; an empty id matches no
    document ACL, as in :attr:`Principal.users`). Names PostgreSQL cannot store are left out:
    no stored row can carry them, so leaving them out never hides a readable row.
    """
    return {
        "role": READER_ROLE,
        "user_id": [principal.user_id] if storable_name(principal.user_id) else [],
        "groups": [g for g in principal.groups if storable_name(g)],
    }


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


@contextmanager
def read_as(conn: psycopg.Connection, principal: Principal) -> Iterator[None]:
    """Run the block's statements as the reader role, for ``principal``; roll back at the end."""
    with conn.transaction() as tx:
        conn.execute(_ENTER_SQL, principal_settings(principal))
        yield
        raise psycopg.Rollback(tx)
