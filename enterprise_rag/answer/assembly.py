"""The answer assembled from what verified: the kept sentences, the spans shown quoted, the missing parts.

A verified sentence that loses a figure its span gives is shown as that span, quoted: the model was
asked to copy, and a figure is what a question usually asks for. With strong evidence, a line whose
sentence failed verification twice is quoted in its place (the model chose the line; its restatement
is what failed), and with no sentence verified the chosen spans are quoted. A question part no kept
text answers is named as missing.
"""

from __future__ import annotations

from collections.abc import Sequence

from enterprise_rag.answer.checks.draft import Draft, Sentence, quoting
from enterprise_rag.answer.checks.parts import answered_parts
from enterprise_rag.answer.checks.verification import numbers_left_out, states_nothing
from enterprise_rag.schema.spans import Span


def assemble(verified: Sequence[Sentence], dropped: Sequence[Sentence], fallback: Sequence[Span],
             parts: Sequence[str]) -> Draft | None:  # fmt: skip
    """The answer of ``verified`` (in order, connecting lines included) less ``dropped``; ``fallback``: the
    chosen spans on strong evidence (empty on weak evidence), quoted for dropped sentences and when no
    verified sentence states anything. None: nothing to answer with."""
    stated = [x for x in verified if not states_nothing(x.text)]
    lossy = [x for x in stated if numbers_left_out(x)]
    quoted = {sp for x in lossy for sp in x.spans}
    kept = [x for x in verified if x not in lossy]
    if fallback:  # a chosen line no kept sentence rests on is quoted for the sentence that failed on it
        cited = {sp for x in kept for sp in x.spans}
        replaced = [x for x in dropped if set(x.spans) <= set(fallback) and not set(x.spans) <= cited]
        quoted |= {sp for x in replaced for sp in x.spans}
        dropped = [x for x in dropped if x not in replaced]
    if not stated:
        if not fallback:
            return None
        quoted |= set(fallback)
    texts = [t for x in kept for t in (x.text, *(sp.with_context() for sp in x.spans))]
    texts += [sp.with_context() for sp in quoted]
    missing = [p for p, ok in zip(parts, answered_parts(list(parts), texts), strict=True) if not ok]
    sentences = _with_connectors(kept) if any(not states_nothing(x.text) for x in kept) else []
    return Draft(tuple(sentences), quoting(sorted(quoted, key=lambda sp: sp.number)), tuple(missing),
                 tuple(x.text for x in dropped))


def _with_connectors(sentences: list[Sentence]) -> list[Sentence]:
    """``sentences`` without connecting lines that introduce nothing (none of the stated sentences after them)."""
    out: list[Sentence] = []
    for i, sentence in enumerate(sentences):
        if states_nothing(sentence.text) and not any(not states_nothing(x.text) for x in sentences[i + 1 :]):
            continue
        out.append(sentence)
    return out
