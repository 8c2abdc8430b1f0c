"""Auto-merging: enough hits under one parent chunk are replaced by the parent.

Like LlamaIndex's AutoMergingRetriever, but parents come from PostgreSQL in
one recursive query that re-checks the ACL at every level (the stock retriever
fetches parents one by one from a docstore, outside any permission filter).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from enterprise_rag.principal import Principal
from enterprise_rag.retrieval.hybrid import ACL, Hit


@dataclass(frozen=True)
class ParentRow:
    node_id: str
    parent_id: str | None
    document_id: str
    text: str
    metadata: dict[str, Any]
    child_count: int


_ANCESTORS_SQL = f"""
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


def fetch_ancestors(conn: psycopg.Connection, principal: Principal, parent_ids: list[str]) -> dict[str, ParentRow]:
    """Every ancestor of the given parents that the principal may read, in one query."""
    if not parent_ids:
        return {}
    rows = conn.execute(
        _ANCESTORS_SQL, {"ids": parent_ids, "groups": list(principal.groups), "users": principal.users}
    ).fetchall()
    return {r[0]: ParentRow(r[0], r[1], r[2], r[3], r[4], int(r[5])) for r in rows}


def auto_merge(hits: list[Hit], parents: dict[str, ParentRow], threshold: float) -> list[Hit]:
    """Replace groups of sibling hits by their parent while ``hits/children >= threshold``.

    The parent takes the best score and the rank position of its best child.
    Repeats level by level, so a merged parent can merge into its own parent.
    """
    current = list(hits)
    while True:
        by_parent: dict[str, list[int]] = {}
        for i, hit in enumerate(current):
            if hit.parent_id in parents:
                by_parent.setdefault(hit.parent_id, []).append(i)
        merge = {
            pid: idx
            for pid, idx in by_parent.items()
            if parents[pid].child_count and len(idx) / parents[pid].child_count >= threshold
        }
        if not merge:
            return current
        replaced: dict[int, Hit] = {}
        dropped: set[int] = set()
        for pid, idx in merge.items():
            row = parents[pid]
            best = min(idx, key=lambda i: -current[i].score)
            merged_from = [current[i].node_id for i in idx]
            replaced[min(idx)] = Hit(
                node_id=row.node_id, document_id=row.document_id, parent_id=row.parent_id, text=row.text,
                metadata=row.metadata, score=current[best].score,
                dense_rank=current[best].dense_rank, text_rank=current[best].text_rank,
                dense_similarity=max((current[i].dense_similarity or 0.0) for i in idx),
                extra={"merged_from": merged_from},
            )  # fmt: skip
            dropped.update(idx)
        current = [replaced.get(i, h) for i, h in enumerate(current) if i not in dropped or i in replaced]
