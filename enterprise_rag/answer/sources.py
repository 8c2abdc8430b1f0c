"""Turning passages and web results into numbered sources, and refining them.

Refinement drops paragraphs of a kept passage that share no word with the
question and sit below a similarity floor (one batched embedding call for all
strips), the rows of a table keyed by numeric ranges that do not hold a number
of the question, and the sections headed by another identifier than the one
asked about; page, source and date stay with the passage. The corpus passages are
then ordered by their paragraph most like the question: the local generator leans
on S1, and can answer "not found" while the sentence that answers sits in S2.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeWithScore

from enterprise_rag.schema.sources import Source, WebResult
from enterprise_rag.text import STOPWORDS, identifiers, is_heading, query_words


def corpus_sources(nodes: list[NodeWithScore]) -> list[Source]:
    sources = []
    for i, n in enumerate(nodes, 1):
        meta = n.node.metadata
        sources.append(Source(
            label=f"S{i}", text=n.node.get_content(), source=str(meta.get("source", "")), page=meta.get("page"),
            title=str(meta.get("title", "")), breadcrumb=str(meta.get("breadcrumb", "")),
            effective_date=meta.get("effective_date"), status=str(meta.get("status", "current")),
            document_id=str(meta.get("document_id", "")), node_id=n.node.node_id,
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
        )  # fmt: skip
        for i, r in enumerate(results)
    ]


def relabel(sources: list[Source]) -> list[Source]:
    """Number sources S1..Sn in order (after some were dropped or added)."""
    return [replace(s, label=f"S{i}") for i, s in enumerate(sources, 1)]


def refine(question: str, sources: list[Source], embed_model: BaseEmbedding, floor: float) -> tuple[list[Source], int]:
    """Drop irrelevant paragraphs, range rows and sections inside sources; returns the sources and the strips
    dropped."""
    cuts = 0
    trimmed = []
    for source in sources:
        text, rows = rows_in_range(question, source.text)
        text, sections = sections_named_as_asked(question, text)
        trimmed.append(replace(source, text=text))
        cuts += rows + sections
    refined, dropped, closeness = _drop_paragraphs(question, trimmed, embed_model, floor)
    order = sorted(range(len(refined)), key=lambda i: (refined[i].kind != "corpus", -closeness[i]))
    return relabel([refined[i] for i in order]), dropped + cuts


def sections_named_as_asked(question: str, text: str) -> tuple[str, int]:
    """``text`` without its sections headed by an identifier other than the question's; returns the
    text and the sections dropped.

    A small model takes rules of a neighbouring section of the same merged passage, about another
    code, into its answer. Only cut when a heading does name an identifier of
    the question; sections whose heading names no identifier ("Reporting a new code") stay.
    """
    asked = identifiers(question)
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if is_heading(line)]
    named = {i: identifiers(lines[i]) for i in starts}
    if not asked or not any(asked & ids for ids in named.values()):
        return text, 0
    drop: set[int] = set()
    sections = 0
    for start, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        if named[start] and not asked & named[start]:
            drop.update(range(start, end))
            sections += 1
    return "\n".join(line for i, line in enumerate(lines) if i not in drop), sections


# A table row whose first cell is a closed numeric range: "18-24 | Practitioner", "| $0 - $500 | none |".
_RANGE_ROW = re.compile(r"^\s*\|?\s*[$€£]?(\d[\d,]*(?:\.\d+)?)\s*(?:-|–|—|to)\s*[$€£]?(\d[\d,]*(?:\.\d+)?)\s*%?\s*\|")
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def rows_in_range(question: str, text: str) -> tuple[str, int]:
    """``text`` without the rows of a range-keyed table that miss every number of the question.

    Asked "I scored 21, which band?", the local model read the band of a neighbouring row
    ("12-17 | Apprentice" instead of "18-24 | Practitioner"). A table is only cut when one of
    its range rows holds a number of the question; headers and other rows stay.
    """
    numbers = [float(n.replace(",", "")) for n in _NUMBER.findall(question)]
    if not numbers:
        return text, 0
    lines = text.split("\n")
    drop: set[int] = set()
    table: dict[int, bool] = {}  # range row -> holds a number of the question, for the current table

    def close_table() -> None:
        if len(table) > 1 and any(table.values()):
            drop.update(i for i, hit in table.items() if not hit)
        table.clear()

    for i, line in enumerate(lines):
        if "|" not in line:
            close_table()
            continue
        match = _RANGE_ROW.match(line)
        if match:
            lo, hi = (float(g.replace(",", "")) for g in match.groups())
            table[i] = any(lo <= n <= hi for n in numbers)
    close_table()
    return "\n".join(line for i, line in enumerate(lines) if i not in drop), len(drop)


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
