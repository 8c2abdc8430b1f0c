"""Choosing the passages the generator reads, turning them and web results into numbered sources, and refining them.

Refinement drops paragraphs of a kept passage that share no word with the
question and sit below a similarity floor (one batched embedding call for all
strips); page, source and date stay with the passage. The corpus passages are
then ordered by their paragraph most like the question, so the best evidence
comes first whatever order retrieval gave.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeWithScore

from enterprise_rag.answer.checks.grading import Grade
from enterprise_rag.schema.documents import shown_source
from enterprise_rag.schema.sources import Source, WebResult
from enterprise_rag.text import STOPWORDS, query_words


def kept_passages(
    candidates: list[NodeWithScore], grades: Mapping[str, Grade], *, proceed: bool, limit: int
) -> list[NodeWithScore]:
    """Passages for the generator, best retrieval score first, at most ``limit``: on proceed those graded yes
    or partial (partial: the grader is unsure, and the generator with the checks in code is the last judge);
    otherwise the partial and ungraded ones."""
    wanted = {"yes", "partial"} if proceed else {"partial", "ungraded"}
    ranked = sorted(candidates, key=lambda n: -(n.score or 0.0))
    return [n for n in ranked if n.node.node_id in grades and grades[n.node.node_id].grade in wanted][:limit]


def corpus_sources(nodes: list[NodeWithScore]) -> list[Source]:
    sources = []
    for i, n in enumerate(nodes, 1):
        meta = n.node.metadata
        sources.append(Source(
            label=f"S{i}", text=n.node.get_content(), source=str(meta.get("source", "")), page=meta.get("page"),
            title=str(meta.get("title", "")), breadcrumb=str(meta.get("breadcrumb", "")),
            effective_date=meta.get("effective_date"), status=str(meta.get("status", "current")),
            document_id=str(meta.get("document_id", "")), node_id=n.node.node_id,
            relative_source=shown_source(meta),
        ))  # fmt: skip
    return sources


def web_sources(results: list[WebResult], start: int) -> list[Source]:
    return [
        Source(
            label=f"S{start + i}",
            text=r.content,
            source=r.url,
            page=None,
            title=r.title,
            breadcrumb=r.title,
            effective_date=r.published_date,
            status="current",
            document_id=r.url,
            kind="web",
            relative_source=r.url,
        )  # fmt: skip
        for i, r in enumerate(results)
    ]


def relabel(sources: list[Source]) -> list[Source]:
    """Number sources S1..Sn in order (after some were dropped or added)."""
    return [replace(s, label=f"S{i}") for i, s in enumerate(sources, 1)]


def refine(question: str, sources: list[Source], embed_model: BaseEmbedding, floor: float) -> tuple[list[Source], int]:
    """Drop irrelevant paragraphs inside sources and order them; returns the sources and the strips dropped."""
    refined, dropped, closeness = _drop_paragraphs(question, sources, embed_model, floor)
    order = sorted(range(len(refined)), key=lambda i: (refined[i].kind != "corpus", -closeness[i]))
    return relabel([refined[i] for i in order]), dropped


def _drop_paragraphs(
    question: str, sources: list[Source], embed_model: BaseEmbedding, floor: float
) -> tuple[list[Source], int, list[float]]:
    """The sources without their strips below ``floor`` that share no word with the question, the number
    dropped, and each source's highest strip similarity to the question."""
    words = {w for w in query_words(question) if w not in STOPWORDS and len(w) > 2}
    strips = [(i, p) for i, s in enumerate(sources) for p in re.split(r"\n\s*\n", s.text) if p.strip()]
    if not strips:
        return sources, 0, [0.0] * len(sources)
    vectors = np.asarray(embed_model.get_text_embedding_batch([question] + [p for _, p in strips]), dtype=np.float32)
    sims = vectors[1:] @ vectors[0]
    kept: dict[int, list[str]] = {i: [] for i in range(len(sources))}
    closeness = [-1.0] * len(sources)
    dropped = 0
    for (i, strip), sim in zip(strips, sims, strict=True):
        closeness[i] = max(closeness[i], float(sim))
        overlap = words & set(query_words(strip))
        if sim < floor and not overlap:
            dropped += 1
        else:
            kept[i].append(strip)
    refined = [replace(s, text="\n\n".join(kept[i]) or s.text) for i, s in enumerate(sources)]
    return refined, dropped, closeness
