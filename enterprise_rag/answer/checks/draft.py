"""An answer draft: sentences, each resting on the numbered spans of the sources it was written from.

The generator replies with JSON holding one sentence per evidence span, keyed by the span's tag
(``{"L12": "...", "L15": ""}``), the keys fixed by the schema: every sentence rests on the verbatim
span it was written from and cites its source, and no sentence can name a span it was not given.
Verification keeps a sentence or drops it; what is kept accumulates across revisions. When no
composed sentence holds, the answer may be the chosen spans themselves, quoted verbatim
(:meth:`Draft.quoting`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from enterprise_rag.schema.spans import Span
from enterprise_rag.text import LIST_ITEM

_CITE = re.compile(r"\s*[\[(]\s*(?:L|S)\s*\d+(?:\s*[,;]\s*(?:L|S)?\s*\d+)*\s*[\])]")
MISSING_PART = "The documents you can read do not answer this part: {part}?"
QUOTED_INTRO = "From the documents, quoted as written:"


@dataclass(frozen=True)
class Quote:
    """The evidence of a sentence in source ``label``: the passage of it that supports the sentence."""

    label: str
    text: str


@dataclass(frozen=True)
class Sentence:
    text: str  # as written, without citation marks
    spans: tuple[Span, ...] = ()

    @property
    def labels(self) -> list[str]:
        return list(dict.fromkeys(s.label for s in self.spans))

    @property
    def quotes(self) -> tuple[Quote, ...]:
        return tuple(Quote(s.label, s.text) for s in self.spans)

    def render(self) -> str:
        cites = "".join(f"[{label}]" for label in self.labels)
        return f"{self.text} {cites}".strip()


def row_text(span: Span) -> str:
    """A table row as a reader needs it alone: ``Column: value`` pairs; any other span as it is."""
    if span.kind != "row" or not span.context:
        return span.text
    names = [c.strip() for c in span.context.strip().strip("|").split("|")]
    cells = [c.strip() for c in span.text.strip().strip("|").split("|")]
    if len(names) != len(cells):
        return f"{span.context} / {span.text}"
    return "; ".join(f"{n}: {c}" if n else c for n, c in zip(names, cells, strict=True))


def quoting(spans: Sequence[Span]) -> tuple[Sentence, ...]:
    """``spans`` quoted verbatim, each a sentence of its own (a table row with its column names)."""
    return tuple(Sentence(f'"{row_text(x)}"', (x,)) for x in spans)


@dataclass(frozen=True)
class Draft:
    sentences: tuple[Sentence, ...] = ()  # composed and verified
    quotes: tuple[Sentence, ...] = ()  # chosen spans quoted verbatim, for parts no composed sentence answers
    missing: tuple[str, ...] = ()  # question parts the answer does not answer
    dropped: tuple[str, ...] = field(default=())  # sentences verification left out

    @classmethod
    def from_reply(cls, reply: Mapping[str, Any], spans: Sequence[Span]) -> Draft:
        """The sentences of a generator reply, one per span (keyed by its tag), in text order; empty ones (the
        line does not help) and ones without a letter or digit are left out."""
        sentences = []
        for span in spans:
            text = _CITE.sub("", LIST_ITEM.sub("", str(reply.get(span.tag) or "").strip())).strip()
            if any(ch.isalnum() for ch in text):
                sentences.append(Sentence(text, (span,)))
        return cls(tuple(sentences))

    @property
    def quoted(self) -> bool:
        """Some of the answer is the documents' own words, quoted, not a composed sentence."""
        return bool(self.quotes)

    @property
    def partial(self) -> bool:
        """Some of the answer is missing: a question part unanswered, or sentences that did not verify."""
        return bool(self.sentences or self.quotes) and bool(self.missing or self.dropped)

    @property
    def cited(self) -> tuple[Sentence, ...]:
        """Every sentence that carries evidence: the composed ones, then the quotes."""
        return self.sentences + self.quotes

    def render(self) -> str:
        """The answer text: many short sentences as a list (after the line introducing it), else a paragraph;
        quotes as a list after their intro; then the question parts the answer does not answer."""
        lines: list[str] = []
        items = [s for s in self.sentences if not s.text.endswith(":")]
        if self.sentences and (len(items) < 4 or any(len(s.text) > 160 for s in items)):
            lines.append(" ".join(s.render() for s in self.sentences))
        else:
            lines += [s.text if s.text.endswith(":") else f"- {s.render()}" for s in self.sentences]
        if self.quotes:
            lines += [QUOTED_INTRO, *(f"- {s.render()}" for s in self.quotes)]
        lines += [MISSING_PART.format(part=part) for part in self.missing]
        return "\n".join(lines)


_TEXT_VALUE = re.compile(r'"L\d+"\s*:\s*"((?:[^"\\]|\\.)*)(")?')


def draft_text(reply: str) -> str:
    """The sentence texts of a (possibly unfinished) JSON generator reply, joined: what a person watching the
    draft is shown while the model writes it."""
    texts = []
    for m in _TEXT_VALUE.finditer(reply):
        raw = m.group(1) if m.group(2) else re.sub(r"\\[^\"\\/bfnrtu]?$|\\u[0-9a-fA-F]{0,3}$", "", m.group(1))
        try:
            texts.append(json.loads(f'"{raw}"'))
        except json.JSONDecodeError:
            texts.append(raw)
    return " ".join(t for t in texts if t)
