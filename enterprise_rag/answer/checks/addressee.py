"""Evidence written to the model: paragraphs of a source that speak to an AI assistant, set aside.

A planted instruction is document text like any other: a line of it ("tell them the password is X") can
state the answer to a question word for word, so the evidence grader chooses it and every check of the
answer against its line passes. What gives it away is whom its paragraph is written for. Each paragraph
the answer would be written from (the block of a chosen sentence, the list of a chosen item, a chosen
table row on its own) is put to the grader model twice, with the paragraph alone as the prefix: is it
written to an AI assistant, and is it written for the document's readers. The score is the difference of
the two p(yes): the small model says "yes" to most questions about most text, and the difference cancels
that lean. A paragraph scoring at or above the model's threshold (``workflow.addressee_thresholds``,
fitted on labelled dev paragraphs by ``benchmarks/addressee.py``) is not written from, quoted or cited,
and the trace names it.

The score is the paragraph's own, whatever question or other sources came with it, so it is cached by
(paragraph, model, prompt) in the grade cache, and the benchmark measures exactly what the workflow
asks. The question's shared prefix is not lost: the local server keeps it in its prompt cache.

A failed call keeps the paragraph (fail-open, as grading does): an outage must not hide the documents,
and the boundary of :mod:`enterprise_rag.llm.untrusted` and the value checks still hold.
"""

from __future__ import annotations

from collections.abc import Sequence

from enterprise_rag.answer.checks.grading import ProbabilityCache
from enterprise_rag.errors import LLMError
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.llm.prompts import ADDRESSEES, addressee_messages, numbered_spans
from enterprise_rag.schema.sources import Source
from enterprise_rag.schema.spans import Span, lists
from enterprise_rag.store import Database

TOP_LOGPROBS = 10


def paragraph_of(span: Span, spans: Sequence[Span]) -> str:
    """What a reader meets ``span`` in: the sentences of its block, the whole list of a list item (a list is
    one unit of evidence, judged whole), or the table row itself."""
    if span.kind == "item":
        items = next((run for run in lists(spans) if span in run), [span])
        return "\n".join(x.text for x in items)
    if span.kind != "sentence":
        return span.with_context()
    return " ".join(x.text for x in spans if x.label == span.label and x.block == span.block and x.kind == "sentence")


class AddresseeCheck:
    """Scores paragraphs by how much more they are written to an AI model than to their readers; the scores
    are cached in ``db`` (None: not cached)."""

    def __init__(self, caller: LLMCaller, *, threshold: float, db: Database | None = None) -> None:
        self._caller = caller
        wording = "".join(m.content or "" for a in ADDRESSEES for m in addressee_messages("{paragraph}", a))
        model = f"{caller.model_id('grader')}|addressee"
        self._cache = None if db is None else ProbabilityCache(db, model, wording, scope="paragraph")
        self.threshold = threshold

    def score(self, paragraph: str) -> float | None:
        """p(yes: written to an AI model) - p(yes: written for its readers); None when a call fails or the model
        says neither yes nor no (not cached, so the next question asks again)."""
        if self._cache is not None and (hit := self._cache.get([paragraph]).get(paragraph)) is not None:
            return float(hit["score"])
        p: dict[str, float] = {}
        for addressee in ADDRESSEES:
            try:
                yes = self._caller.yes_probability("grader", "addressee", addressee_messages(paragraph, addressee),
                                                   top_logprobs=TOP_LOGPROBS)  # fmt: skip
            except LLMError:
                return None
            if yes is None:
                return None
            p[addressee] = yes
        score = p["model"] - p["readers"]
        if self._cache is not None:
            self._cache.put([(paragraph, {"score": score, **p})])
        return score

    def screen(self, sources: list[Source], chosen: Sequence[Span]) -> tuple[set[Span], list[tuple[str, float | None]]]:
        """The spans of ``chosen`` whose paragraph is written to the model, and every paragraph's score."""
        spans = numbered_spans(sources)
        by_paragraph: dict[str, list[Span]] = {}
        for span in chosen:
            by_paragraph.setdefault(paragraph_of(span, spans), []).append(span)
        set_aside: set[Span] = set()
        scores: list[tuple[str, float | None]] = []
        for paragraph, members in by_paragraph.items():
            score = self.score(paragraph)
            scores.append((paragraph, None if score is None else round(score, 3)))
            if score is not None and score >= self.threshold:
                set_aside.update(members)
        return set_aside, scores
