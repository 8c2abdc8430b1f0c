"""A structured answer draft: whether the sources answer, and the answer as sentences with their evidence.

The generator replies with the answer, ``[S1]``-style labels after its sentences, or
with exactly the not-found answer. That whole reply is the not-found signal: no
phrase inside an answer is ("You don't have to ..." is a cited fact like any other).
Code finds and checks the evidence of every sentence in the sources it cites
(:mod:`enterprise_rag.answer.checks.verification`) and renders what survives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from enterprise_rag.answer.checks.citations import cited_labels, split_sentences, strip_citations
from enterprise_rag.llm.prompts import NOT_FOUND_ANSWER

_BARE = re.compile(r"[\W_]+")


def _bare(text: str) -> str:
    """Letters and digits only, lower case: the not-found reply with or without its quotes and period."""
    return _BARE.sub(" ", text.casefold()).strip()


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
    def from_reply(cls, reply: str) -> Draft:
        """The draft of a generator reply: not found when the reply is the not-found answer itself (the whole
        reply, not a phrase inside it); else its sentences and the labels each cites (their evidence is
        found in code). Sentences with no words are left out."""
        if _bare(reply) == _bare(NOT_FOUND_ANSWER):
            return cls(False)
        sentences = []
        for unit in split_sentences(reply):
            text = _LIST_MARKER.sub("", strip_citations(unit)).strip()
            if any(ch.isalnum() for ch in text):
                sentences.append(Sentence(text, tuple(Quote(label, "") for label in cited_labels(unit))))
        return cls(True, tuple(sentences))

    @property
    def not_found(self) -> bool:
        """Only ``found: false`` or an empty answer is a not-found, whatever the sentences say."""
        return not self.found or not self.sentences

    def render(self) -> str:
        """The answer text: many short sentences as a list (after the line introducing it), else a paragraph."""
        items = [s for s in self.sentences if not s.text.endswith(":")]
        if len(items) < 4 or any(len(s.text) > 160 for s in items):
            return " ".join(s.render() for s in self.sentences)
        return "\n".join(s.render() if s.text.endswith(":") else f"- {s.render()}" for s in self.sentences)

    def keep(self, sentences: list[Sentence]) -> Draft:
        return Draft(self.found, tuple(sentences))
