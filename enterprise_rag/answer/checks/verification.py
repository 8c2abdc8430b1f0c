"""Verifying a structured draft in code, strictly, before any model checks it.

A sentence is kept only when all of these hold:

* it cites at least one source, by a label that exists;
* each quote is evidence (at least ``MIN_QUOTE_WORDS`` words) and is found in the source it cites,
  compared on words (case, whitespace, quote marks, dashes and Markdown markup do not matter); a quote
  found in another source instead moves the citation there, since the quote shows where it came from;
  a quote found nowhere is removed, and a sentence with no quote left fails;
* every number and identifier (a token mixing letters and digits) of the sentence appears in one of
  its verified sources or in the question (the user's own words may be repeated); identifiers are
  compared without their punctuation and spacing ("KV 12" is "kv-12"), from a word start.

A failing sentence is sent back for one revision with the reasons (:meth:`Verification.feedback`),
then dropped. A draft with no sentence left is a not-found.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

from enterprise_rag.answer.checks.draft import Draft, Quote, Sentence
from enterprise_rag.answer.checks.numbers import numbers
from enterprise_rag.text import identifiers

MIN_QUOTE_WORDS = 3
_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"), "-")
_APOSTROPHES = dict.fromkeys(map(ord, "\u2018\u2019\u201a\u201b\u2032`"), "'")
_WORD = re.compile(r"[^\W_]+(?:['.,:/-][^\W_]+)*")


def word_sequence(text: str) -> str:
    """``text`` as its words, lower case, single-spaced and padded: what quotes are compared on."""
    text = unicodedata.normalize("NFKC", text).translate(_DASHES).translate(_APOSTROPHES).casefold()
    return f" {' '.join(_WORD.findall(text))} "


def quote_found(quote: str, source: str) -> bool:
    """Whether ``quote`` is an evidence-sized run of words of ``source``."""
    words = word_sequence(quote)
    return len(words.split()) >= MIN_QUOTE_WORDS and words in word_sequence(source)


@dataclass(frozen=True)
class Problem:
    """A sentence that failed verification, and why."""

    sentence: Sentence
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Verification:
    kept: Draft  # the sentences that passed, with their verified quotes only
    problems: tuple[Problem, ...]
    relabelled: int  # quotes moved to the source that holds them
    quotes: int  # quotes in the draft
    quotes_found: int  # of them, found in the source they cite

    def feedback(self) -> str:
        """Lines for the revision prompt (empty when every sentence passed)."""
        return "\n".join(f'- "{p.sentence.text[:160]}": {"; ".join(p.reasons)}.' for p in self.problems)

    def to_trace(self) -> dict[str, object]:
        return {
            "sentences": len(self.kept.sentences) + len(self.problems), "kept": len(self.kept.sentences),
            "quotes": self.quotes, "quotes_found": self.quotes_found, "relabelled": self.relabelled,
            "problems": [(p.sentence.text, list(p.reasons)) for p in self.problems],
        }  # fmt: skip


def _place(quote: Quote, sources: Mapping[str, str]) -> tuple[Quote | None, bool]:
    """The quote with the label of the source holding it (its own first), and whether it moved."""
    if quote.label in sources and quote_found(quote.text, sources[quote.label]):
        return quote, False
    holder = next((label for label, text in sources.items() if quote_found(quote.text, text)), None)
    return (Quote(holder, quote.text), True) if holder is not None else (None, False)


def _compact(text: str) -> tuple[str, set[int]]:
    """The letters and digits of ``text`` run together, and the offsets where its words start."""
    compact, starts = "", set()
    for word in word_sequence(text).split():
        starts.add(len(compact))
        compact += re.sub(r"[\W_]", "", word)
    return compact, starts


def _named_in(identifier: str, texts: list[str]) -> bool:
    wanted = _compact(identifier)[0]
    for text in texts:
        compact, starts = _compact(text)
        at = compact.find(wanted)
        while at >= 0:
            if at in starts:
                return True
            at = compact.find(wanted, at + 1)
    return False


def _unknown_values(sentence: str, cited: list[str], question: str) -> list[str]:
    """The numbers and identifiers of ``sentence`` found in none of the ``cited`` texts nor the question."""
    codes = identifiers(sentence)
    plain = sentence
    for code in codes:  # a code's digits are checked as part of the code, not again as a number
        plain = re.sub(re.escape(code), " ", plain, flags=re.IGNORECASE)
    known = numbers(question).union(*(numbers(t) for t in cited))
    return sorted(numbers(plain) - known) + sorted(i for i in codes if not _named_in(i, [*cited, question]))


def verify_draft(draft: Draft, sources: Mapping[str, str], question: str) -> Verification:
    """Check every sentence of ``draft`` against ``sources`` (label -> text) and the ``question``."""
    kept: list[Sentence] = []
    problems: list[Problem] = []
    relabelled = total = found = 0
    for sentence in draft.sentences:
        reasons: list[str] = []
        quotes: list[Quote] = []
        for quote in sentence.quotes:
            total += 1
            placed, moved = _place(quote, sources)
            if placed is None:
                if quote.label not in sources:
                    reason = "is not from a numbered source"
                elif len(word_sequence(quote.text).split()) < MIN_QUOTE_WORDS:
                    reason = f"is too short to be evidence (at least {MIN_QUOTE_WORDS} words)"
                else:
                    reason = f"is not in {quote.label}"
                reasons.append(f'the quote "{quote.text[:100]}" {reason}')
                continue
            found += not moved
            relabelled += moved
            if placed not in quotes:
                quotes.append(placed)
        if quotes:
            cited = [sources[label] for label in dict.fromkeys(q.label for q in quotes)]
            missing = _unknown_values(sentence.text, cited, question)
            if not missing:
                kept.append(Sentence(sentence.text, tuple(quotes)))
                continue
            reasons = [f"{', '.join(missing)} is in none of its cited sources"]
        else:
            reasons.append("no quote of it is found in a cited source; copy the words of the source exactly")
        problems.append(Problem(sentence, tuple(reasons)))
    return Verification(draft.keep(kept), tuple(problems), relabelled, total, found)
