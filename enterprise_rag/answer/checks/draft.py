"""A structured answer draft: whether the sources answer, and the answer as sentences with their evidence.

The generator replies in JSON (:func:`enterprise_rag.llm.prompts.answer_schema`):
``found``, then ``sentences``, each the label of the source it comes from, a quote
copied from that source, and the sentence itself. Code reads the not-found signal from
``found`` and never from the wording of the answer, checks every quote
(:mod:`enterprise_rag.answer.checks.verification`), and renders what survives as
the ``[S1]``-cited text users see.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from enterprise_rag.answer.checks.citations import strip_citations

_LIST_MARKER = re.compile(r"^(?:[-*+\u2022]|\d{1,3}[.)])\s+")


@dataclass(frozen=True)
class Quote:
    """Words the generator says it copied from source ``label``."""

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
        """The draft of a schema-checked generator reply; sentences with no words are left out."""
        sentences = []
        for item in reply.get("sentences") or []:
            text = _LIST_MARKER.sub("", strip_citations(str(item.get("text", ""))).strip())
            label, quote = str(item.get("source", "")).strip().upper(), str(item.get("quote", "")).strip()
            quotes = (Quote(label, quote),) if label else ()
            if any(ch.isalnum() for ch in text):
                sentences.append(Sentence(text, quotes))
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
        return json.dumps(
            {
                "found": self.found,
                "sentences": [
                    {"source": q.label, "quote": q.text, "text": s.text} for s in self.sentences for q in s.quotes[:1]
                ],
            },
            ensure_ascii=False,
        )

    def keep(self, sentences: list[Sentence]) -> Draft:
        return Draft(self.found, tuple(sentences))
