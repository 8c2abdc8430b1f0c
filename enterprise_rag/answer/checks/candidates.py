"""The evidence the model is asked about: the kept sources' spans, ranked for the question, as units.

The local model judges a line well when the line is quoted right before its task, and badly when
it must find it by a label in a long prompt; it cannot be asked about every line of four passages in
the time one answer takes. So the spans are ranked in code and the best ``limit`` units are put to
the model one by one (:meth:`~enterprise_rag.answer.checks.grading.Grader.grade_units`). A unit is one
span (a sentence, a heading, a table row with its header row) or one whole list: its items are
judged together, as a list answers whole or not at all, also when a page break splits it.

The rank fuses two orders by reciprocal rank fusion, as hybrid retrieval does: the dense similarity
of the question to each span read in its place (under its heading) and to its block (its paragraph,
list or table), and the number of the question's content words and codes they share. The rank only
decides what the model is asked about; the model's p(yes) decides what is evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

from enterprise_rag.schema.spans import Span, lists
from enterprise_rag.text import identifiers, terms

RRF_K = 10
MAX_LIST = 12
PER_BLOCK = 2


@dataclass(frozen=True)
class Evidence:
    """One unit put to the model: its spans (one, or the items of a list) and the heading above them."""

    spans: tuple[Span, ...]
    heading: str = ""

    @property
    def label(self) -> str:
        return self.spans[0].label

    @property
    def key(self) -> str:
        """The unit's identity across prompts: its text, so a cached judgement follows the text."""
        return self.text

    @property
    def text(self) -> str:
        """The unit as the model reads it: under its heading, a table row after its header row."""
        body = "\n".join(s.with_context() for s in self.spans)
        return f"{self.heading}\n{body}" if self.heading else body


def headings(spans: Sequence[Span], sections: Mapping[str, str]) -> dict[int, str]:
    """span number -> the nearest heading above it in its source, else the section its source starts in
    (``sections``: source label -> the last part of its breadcrumb)."""
    out: dict[int, str] = {}
    current, label = "", ""
    for span in spans:
        if span.label != label:
            current, label = sections.get(span.label, ""), span.label
        out[span.number] = current if span.kind != "heading" else ""
        if span.kind == "heading":
            current = span.text.lstrip("#").strip()
    return out


def _fused(dense: np.ndarray, shared: list[int]) -> np.ndarray:
    """Reciprocal rank fusion of a dense-similarity order and a shared-words order."""
    fused = np.zeros(len(shared))
    for order in (np.argsort(-dense, kind="stable"), np.argsort(-np.asarray(shared), kind="stable")):
        for position, i in enumerate(order):
            fused[i] += 1.0 / (RRF_K + position + 1)
    return fused


def _scores(question: str, spans: Sequence[Span], above: Mapping[int, str], embed_model: BaseEmbedding) -> list[float]:
    """Each span's fused score as itself and as part of its block."""
    keys = list(dict.fromkeys((s.label, s.block) for s in spans))
    members = {key: [s for s in spans if (s.label, s.block) == key] for key in keys}
    texts = [f"{above[s.number]}\n{s.with_context()}".strip() for s in spans]
    block_texts = [
        "\n".join([above[members[k][0].number], *(s.with_context() for s in members[k])]).strip() for k in keys
    ]
    vectors = np.asarray(embed_model.get_text_embedding_batch([question, *texts, *block_texts]), dtype=np.float32)
    dense, block_dense = vectors[1 : len(spans) + 1] @ vectors[0], vectors[len(spans) + 1 :] @ vectors[0]
    wanted, codes = set(terms(question)), identifiers(question)

    def shared(text: str) -> int:
        return len(wanted & set(terms(text))) + 2 * len(codes & identifiers(text))

    span_score = _fused(dense, [shared(t) for t in texts])
    block_score = dict(zip(keys, _fused(block_dense, [shared(t) for t in block_texts]), strict=True))
    return [float(span_score[i] + block_score[(s.label, s.block)]) for i, s in enumerate(spans)]


def evidence_units(
    question: str, spans: Sequence[Span], embed_model: BaseEmbedding, limit: int, sections: Mapping[str, str]
) -> list[Evidence]:
    """The best ``limit`` units of ``spans`` for ``question``, best first. A list is one unit, scored by its
    best line (its items, or a line between them); a list's description lines are not units of their own."""
    if not spans:
        return []
    above = headings(spans, sections)
    score = dict(zip((s.number for s in spans), _scores(question, spans, above, embed_model), strict=True))
    units: list[tuple[float, Evidence]] = []
    in_list: set[int] = set()
    for items in lists(spans):
        first, last = items[0].number, items[-1].number
        inside = [n for n in score if first <= n <= last]
        in_list.update(inside)
        units.append((max(score[n] for n in inside), Evidence(tuple(items[:MAX_LIST]), above[first])))
    units += [(score[s.number], Evidence((s,), above[s.number])) for s in spans if s.number not in in_list]
    units.sort(key=lambda u: -u[0])
    return _spread([unit for _, unit in units], limit)


def _spread(ranked: list[Evidence], limit: int) -> list[Evidence]:
    """The first ``limit`` of ``ranked`` with at most ``PER_BLOCK`` sentences of one paragraph and three quarters
    of them from one source while others wait: a question is put several places to look, not one paragraph's
    every sentence (the rows of a table are values each, and stay)."""
    chosen: list[Evidence] = []
    per_block: dict[tuple[str, int], int] = {}
    per_source: dict[str, int] = {}
    waiting: list[Evidence] = []
    for unit in ranked:
        block = (unit.label, unit.spans[0].block)
        crowded = unit.spans[0].kind == "sentence" and per_block.get(block, 0) >= PER_BLOCK
        if crowded or per_source.get(unit.label, 0) >= max(1, limit * 3 // 4):
            waiting.append(unit)
            continue
        chosen.append(unit)
        per_block[block] = per_block.get(block, 0) + 1
        per_source[unit.label] = per_source.get(unit.label, 0) + 1
        if len(chosen) == limit:
            return chosen
    return chosen + waiting[: limit - len(chosen)]
