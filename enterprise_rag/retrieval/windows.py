"""Windows of a long text around what matters: growing a run of neighbours within a budget, and the
part of a passage most about a question (what the LLM reranker is shown of a long parent)."""

from __future__ import annotations

from collections.abc import Sequence

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


def focus(question: str, text: str, limit: int) -> str:
    """The ``limit``-character window of ``text`` sharing most words with the question (whole text if
    short): a long merged parent would otherwise be judged on its first paragraph only."""
    if len(text) <= limit:
        return text
    parts = paragraphs(text)
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
