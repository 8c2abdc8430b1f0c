"""Auto-merging: enough hits under one parent chunk are replaced by the parent.

Like LlamaIndex's AutoMergingRetriever, but parents come from PostgreSQL in
one recursive query that re-checks the ACL at every level
(:func:`~enterprise_rag.store.parents.fetch_ancestors`; the stock retriever
fetches parents one by one from a docstore, outside any permission filter).
Leaf hits can also grow with their section's neighbours, fetched the same way.
"""

from __future__ import annotations

from dataclasses import replace

import psycopg

from enterprise_rag.principal import Principal
from enterprise_rag.retrieval.windows import grow_window
from enterprise_rag.store.parents import ParentRow, SectionLeaf, fetch_section_leaves
from enterprise_rag.store.search import Hit


def auto_merge(hits: list[Hit], parents: dict[str, ParentRow], threshold: float, max_chars: int = 0) -> list[Hit]:
    """Replace groups of sibling hits by their parent while ``hits/children >= threshold``.

    The parent takes the best score and the rank position of its best child.
    Parents longer than ``max_chars`` (when > 0) are never merged into.
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
            if parents[pid].child_count
            and len(idx) / parents[pid].child_count >= threshold
            and (max_chars <= 0 or len(parents[pid].text) <= max_chars)
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


def expand_within_section(
    conn: psycopg.Connection, principal: Principal, hits: list[Hit], budget_chars: int
) -> list[Hit]:
    """Grow each leaf hit with its neighbours from the same section, up to ``budget_chars``.

    A table after its one-line introduction, or the rest of a short list, then
    arrives with the hit. Neighbours must share the hit's parent and heading
    path (never another section) and pass the ACL. A hit whose window already
    contains a better-ranked hit is dropped, so no text is returned twice.
    """
    leaves = [h for h in hits if not h.extra.get("merged_from")]
    if budget_chars <= 0 or not leaves:
        return hits
    siblings = fetch_section_leaves(conn, principal, [h.node_id for h in leaves])
    covered: set[str] = set()
    out: list[Hit] = []
    for hit in hits:
        if hit.node_id in covered:
            continue
        group = siblings.get(hit.node_id)
        if not group:
            out.append(hit)
            continue
        window = _window(group, hit.node_id, budget_chars)
        ids = [s.node_id for s in window]
        covered.update(ids)
        pages = sorted({p for s in window for p in (s.pages or [])})
        meta = {**hit.metadata, "pages": pages or hit.metadata.get("pages", []),
                "page": pages[0] if pages else hit.metadata.get("page")}  # fmt: skip
        out.append(replace(hit, text="\n\n".join(s.text for s in window), metadata=meta,
                           extra={**hit.extra, "expanded_with": [i for i in ids if i != hit.node_id]}))  # fmt: skip
    return out


def _window(group: list[SectionLeaf], hit_id: str, budget: int) -> list[SectionLeaf]:
    at = next(i for i, s in enumerate(group) if s.node_id == hit_id)
    lo, hi = grow_window([len(s.text) for s in group], at, budget)
    return group[lo : hi + 1]
