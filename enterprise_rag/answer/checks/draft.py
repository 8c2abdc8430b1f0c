"""A structured answer draft: whether the sources answer, and the answer as sentences with their evidence.

The generator replies in JSON (:func:`enterprise_rag.llm.prompts.answer_schema`):
``found``, then the answer with ``[S1]``-style labels after its sentences. Code reads
the not-found signal from ``found`` and never from the wording of the answer, finds
and checks the evidence of every sentence in the sources it cites
(:mod:`enterprise_rag.answer.checks.verification`), and renders what survives.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from enterprise_rag.answer.checks.citations import cited_labels, split_sentences, strip_citations

_LIST_MARKER = re.compile(r"^(?:[-*+\u2022]|\d{1,3}[.)])\s+")


@dataclass(frozen=True)
class Quote:
    """The evidence of a sentence in source ``label``: the passage of it that supports the sentence."""

    label: str
    text: str


@dataclass(frozen=True)
class Sentence:
    text: str  # without citation brackets
    quotes: tuple[Quote, ...]

    @property
    def labels(self) -> list[str]:
        return list(dict.fromkeys(q.label for q in self.quotes))

    def render(self) -> str:
        cites = "".join(f"[{label}]" for label in self.labels)
        return f"{self.text} {cites}".strip()


@dataclass(frozen=True)
class Draft:
    found: bool
    sentences: tuple[Sentence, ...] = field(default_factory=tuple)

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> Draft:
        """The draft of a schema-checked generator reply: its sentences and the labels each cites (their
        quotes are found in code); sentences with no words are left out."""
        sentences = []
        for unit in split_sentences(str(reply.get("answer") or "")):
            text = _LIST_MARKER.sub("", strip_citations(unit)).strip()
            if any(ch.isalnum() for ch in text):
                sentences.append(Sentence(text, tuple(Quote(label, "") for label in cited_labels(unit))))
        return cls(bool(reply.get("found")), tuple(sentences))

    @property
    def not_found(self) -> bool:
        """Only ``found: false`` or an empty answer is a not-found, whatever the sentences say."""
        return not self.found or not self.sentences

    def render(self) -> str:
        """The answer text: one sentence per line when it is a list of many short items, else a paragraph."""
        parts = [s.render() for s in self.sentences]
        listed = len(parts) >= 4 and all(len(s.text) <= 160 for s in self.sentences)
        return "\n".join(f"- {p}" for p in parts) if listed else " ".join(parts)

    def to_json(self) -> str:
        """The draft as the generator's JSON (for a revision prompt)."""
        return json.dumps({"found": self.found, "answer": self.render()}, ensure_ascii=False)

    def keep(self, sentences: list[Sentence]) -> Draft:
        return Draft(self.found, tuple(sentences))
