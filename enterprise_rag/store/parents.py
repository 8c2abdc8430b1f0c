"""Fetches around leaf hits, for one principal: ancestors (for auto-merging) and section neighbours.

Both re-check the ACL on every row they return and run as the row-level-security-bound
reader (:func:`~enterprise_rag.store.scoping.read_as`): a parent or neighbour is never
readable just because a readable leaf points at it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import psycopg

from enterprise_rag.principal import Principal
from enterprise_rag.store.scoping import acl_values, read_as
from enterprise_rag.store.search import ACL


@dataclass(frozen=True)
class ParentRow:
    """A non-leaf node and how many children it has."""

    node_id: str
    parent_id: str | None
    document_id: str
    text: str
    metadata: dict[str, Any]
    child_count: int


class SectionLeaf(NamedTuple):
    """A leaf of a hit's section: same parent, same heading path."""

    node_id: str
    position: int
    text: str
    pages: list[int] | None


# Up the hierarchy in one recursive query, the ACL checked at every level.
ANCESTORS_SQL = f"""
WITH RECURSIVE chain AS (
    SELECT n.node_id, n.parent_id FROM rag_nodes n
    WHERE n.node_id = ANY(%(ids)s) AND {ACL}
    UNION
    SELECT n.node_id, n.parent_id FROM rag_nodes n JOIN chain c ON n.node_id = c.parent_id
    WHERE {ACL}
)
SELECT n.node_id, n.parent_id, n.document_id, n.text, n.metadata,
       (SELECT count(*) FROM rag_nodes k WHERE k.parent_id = n.node_id) AS child_count
FROM chain c JOIN rag_nodes n ON n.node_id = c.node_id
WHERE {ACL}
"""

# The leaves sharing each hit's parent and breadcrumb, in document order: looked up per hit (a lateral
# subquery kept apart by OFFSET 0), so the plan is a parent-index probe per hit whatever the estimates.
SIBLINGS_SQL = f"""
SELECT h.node_id, n.node_id, n.position, n.text, n.pages
FROM rag_nodes h
CROSS JOIN LATERAL (
    SELECT n.node_id, n.position, n.text, n.metadata->'pages' AS pages FROM rag_nodes n
    WHERE n.parent_id = h.parent_id AND n.breadcrumb = h.breadcrumb AND n.is_leaf AND {ACL}
    OFFSET 0
) n
WHERE h.node_id = ANY(%(ids)s) AND h.is_leaf
ORDER BY h.node_id, n.position
"""


# Both lookups go by parent, ten-odd rows each. With no statistics on the text-bearing columns
# (0012_no_statistics_under_rls.sql) the planner guesses that a parent has ~0.5% of the table's
# rows, and so does the ACL's GIN index, and it ANDs the two bitmaps: the ACL side then reads the
# whole readable corpus per parent (200k leaves: 15 ms per parent, ~0.5 s per retrieve). Without
# bitmap scans it walks the parent index and checks the few rows it finds.
_BY_PARENT = "SELECT set_config('enable_bitmapscan', 'off', true)"


def fetch_ancestors(conn: psycopg.Connection, principal: Principal, parent_ids: list[str]) -> dict[str, ParentRow]:
    """Every ancestor of the given parents that the principal may read, in one query."""
    if not parent_ids:
        return {}
    with read_as(conn, principal):
        conn.execute(_BY_PARENT)
        rows = conn.execute(ANCESTORS_SQL, {"ids": parent_ids, **acl_values(principal)}).fetchall()
    return {r[0]: ParentRow(r[0], r[1], r[2], r[3], r[4], int(r[5])) for r in rows}


def fetch_section_leaves(
    conn: psycopg.Connection, principal: Principal, leaf_ids: Sequence[str]
) -> dict[str, list[SectionLeaf]]:
    """For each of these leaves the principal may read, the leaves of its section in order (itself included)."""
    with read_as(conn, principal):
        conn.execute(_BY_PARENT)
        rows = conn.execute(SIBLINGS_SQL, {"ids": list(leaf_ids), **acl_values(principal)}).fetchall()
    sections: dict[str, list[SectionLeaf]] = {}
    for hit_id, node_id, position, text, pages in rows:
        sections.setdefault(hit_id, []).append(SectionLeaf(node_id, position, text, pages))
    return sections
