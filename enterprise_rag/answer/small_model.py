"""Compensations for a small generator model, in one place, behind ``workflow.small_model_aids``.

A model of one or two billion parameters (the embedded default) reads a long
context of several passages, most of them near misses, less well than one or
two passages: it often replies "not found" while a passage it was given holds
the answer, and it confuses near-identical items (codes one digit apart) in
one passage. The aid here is a narrower context: after a not-found from the
kept sources, generation runs once more on the passages the grader found most
likely to answer (graded yes, most probable first; else the most probable one),
each cut to the window the grader judged, with the same neutral prompt, so the
generator may still say the sources do not answer. Every check after it is
unchanged.

``auto`` turns the aids on only for the local model; a larger model does not
need them and pays no extra call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from llama_index.core.base.embeddings.base import BaseEmbedding

from enterprise_rag.answer.checks.grading import Grade
from enterprise_rag.config import SmallModelAids
from enterprise_rag.retrieval.windows import question_windows
from enterprise_rag.schema.sources import Source

NARROW_SOURCES = 2


def aids_enabled(setting: SmallModelAids, *, local: bool) -> bool:
    """Whether the aids apply: ``on``, or ``auto`` when the generator is the local model."""
    return setting == "on" or (setting == "auto" and local)


def narrowed_sources(
    sources: list[Source],
    grades: Mapping[str, Grade],
    question: str,
    *,
    chars: int,
    embed_model: BaseEmbedding | None,
    limit: int = NARROW_SOURCES,
) -> list[Source]:
    """The corpus sources graded yes, most probable first, at most ``limit`` (with none graded yes, the most
    probable one), each cut to its ``chars``-character window most about the question; empty when that
    narrows nothing."""
    ranked = sorted(
        (i for i, s in enumerate(sources) if s.kind == "corpus" and s.node_id in grades),
        key=lambda i: (-grades[sources[i].node_id].confidence, i),
    )
    best = [sources[i] for i in ranked if grades[sources[i].node_id].grade == "yes"][:limit] or [
        sources[i] for i in ranked[:1]
    ]
    windows = question_windows(question, [s.text for s in best], chars, embed_model)
    narrowed = [replace(s, text=text) for s, text in zip(best, windows, strict=True)]
    return narrowed if narrowed and narrowed != sources else []
