"""Choosing the passages the generator reads, turning them and web results into numbered sources, and refining them.

Refinement drops paragraphs of a kept passage that share no word with the
question and sit below a similarity floor (one batched embedding call for all
strips); page, source and date stay with the passage, and the order is retrieval's
(corpus before web). The evidence units put to the grader are the best spans of
the refined sources (:mod:`enterprise_rag.answer.checks.candidates`).
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeWithScore

from enterprise_rag.answer.checks.candidates import Evidence, evidence_units
from enterprise_rag.llm.prompts import numbered_spans
from enterprise_rag.schema.documents import shown_source
from enterprise_rag.schema.sources import Source, WebResult
from enterprise_rag.text import STOPWORDS, query_words


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
    """Drop irrelevant paragraphs inside sources (corpus before web, else retrieval's order); returns the sources
    and the strips dropped."""
    refined, dropped = _drop_paragraphs(question, sources, embed_model, floor)
    return relabel(sorted(refined, key=lambda x: x.kind != "corpus")), dropped


def evidence_of(question: str, sources: list[Source], embed_model: BaseEmbedding, limit: int) -> list[Evidence]:
    """The best ``limit`` evidence units of ``sources`` for ``question``, best first."""
    sections = {x.label: x.breadcrumb.split(" > ")[-1] for x in sources}
    return evidence_units(question, numbered_spans(sources), embed_model, limit, sections)


def _drop_paragraphs(
    question: str, sources: list[Source], embed_model: BaseEmbedding, floor: float
) -> tuple[list[Source], int]:
    """The sources without their strips below ``floor`` that share no word with the question, and the number
    dropped."""
    words = {w for w in query_words(question) if w not in STOPWORDS and len(w) > 2}
    strips = [(i, p) for i, s in enumerate(sources) for p in re.split(r"\n\s*\n", s.text) if p.strip()]
    if not strips:
        return sources, 0
    vectors = np.asarray(embed_model.get_text_embedding_batch([question] + [p for _, p in strips]), dtype=np.float32)
    sims = vectors[1:] @ vectors[0]
    kept: dict[int, list[str]] = {i: [] for i in range(len(sources))}
    dropped = 0
    for (i, strip), sim in zip(strips, sims, strict=True):
        overlap = words & set(query_words(strip))
        if sim < floor and not overlap:
            dropped += 1
        else:
            kept[i].append(strip)
    refined = [replace(s, text="\n\n".join(kept[i]) or s.text) for i, s in enumerate(sources)]
    return refined, dropped
