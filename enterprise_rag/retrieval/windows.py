"""Windows of a long text around what matters: growing a run of neighbours within a budget, and the
part of a passage most about a question (what a grader or reranker is shown of a long parent)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

from enterprise_rag.text import query_words


def grow_window(lengths: Sequence[int], anchor: int, budget: int) -> tuple[int, int]:
    """First and last index of item ``anchor`` plus its neighbours, taken alternately after and
    before it while their summed ``lengths`` stay within ``budget`` (the anchor is always in)."""
    lo, hi, size = anchor, anchor, lengths[anchor]
    while True:
        grown = False
        for candidate in (hi + 1, lo - 1):
            if 0 <= candidate < len(lengths) and size + lengths[candidate] <= budget:
                size += lengths[candidate]
                lo, hi = min(lo, candidate), max(hi, candidate)
                grown = True
        if not grown:
            return lo, hi


def paragraphs(text: str) -> list[str]:
    """The blank-line separated paragraphs of ``text`` (a heading stays with the lines under it)."""
    return [p for p in text.split("\n\n") if p.strip()]


def focus(question: str, text: str, limit: int, relevance: Sequence[float] | None = None) -> str:
    """The ``limit``-character window of ``text`` most about the question (whole text if short).

    A long merged parent would otherwise be judged on its first paragraph only. With
    ``relevance`` (one score per paragraph of :func:`paragraphs`, e.g. dense similarity to the
    question) the window grows around the most relevant paragraph; without it, the window is
    the one sharing most words with the question (literal words miss "set up" vs "install"
    and "invoice" vs "invoices").
    """
    if len(text) <= limit:
        return text
    parts = paragraphs(text)
    if relevance is not None and len(relevance) == len(parts) and parts:
        lo, hi = grow_window([len(p) + 2 for p in parts], int(np.argmax(relevance)), limit)
        return "\n\n".join(parts[lo : hi + 1])[:limit]
    wanted = {w for w in query_words(question) if len(w) > 3}
    best, best_score = text[:limit], -1
    for start in range(len(parts)):
        window: list[str] = []
        size = 0
        for p in parts[start:]:
            if size + len(p) > limit and window:
                break
            window.append(p)
            size += len(p) + 2
        score = len(wanted & set(query_words(" ".join(window))))
        if score > best_score:
            best, best_score = "\n\n".join(window)[:limit], score
    return best


def question_windows(question: str, texts: list[str], limit: int, embed_model: BaseEmbedding | None) -> list[str]:
    """What matters of each text for the question: long ones cut to a ``limit``-character window around
    their paragraph most similar to the question (one embedding batch for all), or by shared words
    without an embedding model.

    A paragraph holding a code of the question (a code such as AB-123, or a year) comes first:
    embeddings barely tell one error code from another, which is why search is hybrid too.
    """
    long = {i: paragraphs(t) for i, t in enumerate(texts) if len(t) > limit}
    if embed_model is None or not long:
        return [focus(question, t, limit) for t in texts]
    flat = [p for parts in long.values() for p in parts]
    query = np.asarray(embed_model.get_query_embedding(question), dtype=np.float32)
    vectors = np.asarray(embed_model.get_text_embedding_batch(flat), dtype=np.float32)
    sims = (vectors @ query) / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query) + 1e-12)
    codes = {w for w in query_words(question) if len(w) > 2 and any(c.isdigit() for c in w)}
    boost = [1.0 if codes & set(query_words(p)) else 0.0 for p in flat]
    relevance: dict[int, Sequence[float]] = {}
    start = 0
    for i, parts in long.items():
        end = start + len(parts)
        relevance[i] = [float(sim) + b for sim, b in zip(sims[start:end], boost[start:end], strict=True)]
        start = end
    return [focus(question, t, limit, relevance.get(i)) for i, t in enumerate(texts)]
