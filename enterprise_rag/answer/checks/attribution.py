"""Citation repair in code: a sentence copied from a source gets that source's label.

Small local models often quote a source faithfully but forget the ``[S1]``
label, or put the label of a neighbouring source. A sentence without a label
whose content words are (almost) all in one source is attributed to that
source, and so is a labelled sentence its cited sources do not ground (see
:mod:`enterprise_rag.answer.checks.grounding`); everything else is left for the
checks to flag. A reporting frame is not part of the copy: "The sources state
that X." is matched on "X". The support check still verifies every claim afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from enterprise_rag.answer.checks.citations import cited_labels, split_line, split_sentences, strip_citations
from enterprise_rag.answer.checks.grounding import MIN_SHARE, grounded_share
from enterprise_rag.text import words

_MIN_WORDS = 4
_REPORTING_FRAME = re.compile(
    r"^\s*(?:according\s+to\s+(?:the\s+)?(?:sources?|documents?)\s*,\s*"
    r"|(?:the\s+)?(?:sources?|documents?)\s+(?:state|say|mention|note|explain)s?\s+(?:that\s+)?)",
    re.IGNORECASE,
)


def _words(text: str) -> set[str]:
    return {w for w in words(text) if len(w) > 2}


def best_source(sentence: str, sources: Mapping[str, str], threshold: float) -> str | None:
    """The label of the source containing at least ``threshold`` of the sentence's words, if one does."""
    words = _words(_REPORTING_FRAME.sub("", sentence))
    if len(words) < _MIN_WORDS:
        return None
    scores = {label: len(words & _words(text)) / len(words) for label, text in sources.items()}
    label = max(scores, key=lambda k: scores[k], default=None)
    return label if label is not None and scores[label] >= threshold else None


def attribute_citations(answer: str, sources: Mapping[str, str], threshold: float = 0.8) -> tuple[str, int]:
    """Add ``[Sk]`` after uncited sentences taken from source ``Sk``; returns the answer and how many were added."""
    added = 0
    lines = []
    for line in answer.split("\n"):
        pieces, cursor = [], 0
        for sentence in split_line(line):
            at = line.find(sentence, cursor)
            if at < 0:
                break
            end = at + len(sentence)
            pieces.append(line[cursor:end])
            cursor = end
            if not cited_labels(sentence):
                label = best_source(sentence, sources, threshold)
                if label is not None:
                    pieces[-1] = pieces[-1].rstrip() + f" [{label}]"
                    added += 1
        pieces.append(line[cursor:])
        lines.append("".join(pieces))
    return "\n".join(lines), added


def reattribute_citations(
    answer: str, sources: Mapping[str, str], question: str, threshold: float = 0.8
) -> tuple[str, int]:
    """Relabel cited sentences their sources do not ground but another source holds; returns the answer and
    how many were relabelled ("... handled the same way. [S2]" copied from S1 becomes "... [S1]")."""
    moved = 0
    for sentence in split_sentences(answer):
        share = grounded_share(sentence, sources, question)
        if share is None or share >= MIN_SHARE:
            continue
        label = best_source(strip_citations(sentence), sources, threshold)
        if label is not None and label not in cited_labels(sentence):
            answer = answer.replace(sentence, f"{strip_citations(sentence)} [{label}]", 1)
            moved += 1
    return answer, moved
