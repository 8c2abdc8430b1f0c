"""Ranking metrics over one query: recall, precision, MRR and nDCG at a cutoff.

Pure functions, no I/O, so the numbers can be checked by hand and compared with
published BEIR results. Conventions shared by every function:

- ``ranked`` is the retrieved document ids, best first. Duplicates count once, at
  their first occurrence: later copies are removed and the list closes up, so
  "top k" means the top k *distinct* ids (a retriever that returns several chunks
  of one document is not rewarded or punished for it).
- ``relevant`` maps document id to graded relevance (the qrels of one query).
  Grades ``<= 0`` mean judged non-relevant and are ignored, as in trec_eval.
- A query with no relevant document scores 0.0 everywhere (trec_eval leaves such
  queries out; :class:`~enterprise_rag.evaluation.dataset.EvalSet` drops them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

Gain = Literal["exponential", "linear"]

__all__ = [
    "Gain",
    "mrr",
    "ndcg_at_k",
    "precision_at_k",
    "recall_at_k",
    "unique_in_order",
]


def unique_in_order(ranked: Sequence[str]) -> list[str]:
    """Drop repeated ids, keeping the first occurrence (so ranks close up).

    >>> unique_in_order(["a", "b", "a", "c"])
    ['a', 'b', 'c']
    """
    return list(dict.fromkeys(ranked))


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")


def _top(ranked: Sequence[str], k: int | None) -> list[str]:
    unique = unique_in_order(ranked)
    return unique if k is None else unique[:k]


def _positive(relevant: Mapping[str, int]) -> dict[str, int]:
    return {doc: grade for doc, grade in relevant.items() if grade > 0}


def recall_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents found in the top ``k``.

    >>> recall_at_k(["a", "x", "b"], {"a": 1, "b": 1, "c": 1, "z": 0}, k=2)
    0.3333333333333333
    """
    _check_k(k)
    positive = _positive(relevant)
    if not positive:
        return 0.0
    hits = sum(1 for doc in _top(ranked, k) if doc in positive)
    return hits / len(positive)


def precision_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Share of the top ``k`` slots holding a relevant document.

    Divides by ``k`` even when fewer than ``k`` ids were returned (trec_eval's
    ``P_k``), so returning less is not a way to look precise.

    >>> precision_at_k(["a", "x"], {"a": 1}, k=4)
    0.25
    """
    _check_k(k)
    positive = _positive(relevant)
    hits = sum(1 for doc in _top(ranked, k) if doc in positive)
    return hits / k


def mrr(ranked: Sequence[str], relevant: Mapping[str, int], k: int | None = None) -> float:
    """Reciprocal rank of the first relevant document (within the top ``k`` if given).

    >>> mrr(["x", "y", "a"], {"a": 1})
    0.3333333333333333
    >>> mrr(["x", "y", "a"], {"a": 1}, k=2)
    0.0
    """
    if k is not None:
        _check_k(k)
    positive = _positive(relevant)
    for rank, doc in enumerate(_top(ranked, k), start=1):
        if doc in positive:
            return 1.0 / rank
    return 0.0


def _gain(grade: int, gain: Gain) -> float:
    if gain == "exponential":
        return float(2**grade - 1)
    if gain == "linear":
        return float(grade)
    raise ValueError(f"gain must be 'exponential' or 'linear', got {gain!r}")


def ndcg_at_k(
    ranked: Sequence[str],
    relevant: Mapping[str, int],
    k: int,
    *,
    gain: Gain = "linear",
) -> float:
    """Normalised discounted cumulative gain of the top ``k``.

    DCG = sum over ranks i = 0..k-1 of gain(rel_i) / log2(i + 2); it is divided by
    the DCG of the ideal ranking, built from the qrels' relevant documents sorted
    by grade (cut at ``k``), the way trec_eval's ``ndcg_cut`` does it.

    ``gain="linear"`` (default) uses rel itself, which is what trec_eval /
    pytrec_eval (and so BEIR) compute, so figures compare with published ones;
    ``gain="exponential"`` uses 2^rel - 1. The two agree for binary qrels.

    >>> round(ndcg_at_k(["x", "a"], {"a": 1}, k=10), 4)   # 1/log2(3) over 1/log2(2)
    0.6309
    >>> round(ndcg_at_k(["b", "a"], {"a": 2, "b": 1}, k=2), 4)  # (1 + 2/log2 3) / (2 + 1/log2 3)
    0.8597
    """
    _check_k(k)
    positive = _positive(relevant)
    if not positive:
        return 0.0
    dcg = sum(_gain(positive[doc], gain) / math.log2(i + 2) for i, doc in enumerate(_top(ranked, k)) if doc in positive)
    ideal = sorted(positive.values(), reverse=True)[:k]
    idcg = sum(_gain(grade, gain) / math.log2(i + 2) for i, grade in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0
