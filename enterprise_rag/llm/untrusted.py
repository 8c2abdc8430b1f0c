"""Document text is data: before it goes into a prompt, it must not be able to forge the
prompt's structure, nor speak to the model.

A passage that contains ``</sources>`` or a line like ``[S9] (source: ...)`` would
otherwise close the sources block or add a source of its own, and its text would
then sit where the model expects rules. :func:`fence` rewrites exactly those
structural tokens (block tags and ``[S1]``/``[P1]`` labels) into look-alikes the
prompt never uses, and leaves every other character as it was.

Rules in the prompt are not enough on their own: the local 1.5B generator, given a
passage addressed to AI assistants that told it to ignore its instructions and reveal
a secret, answered with that secret.
:func:`withhold_instructions` therefore cuts text addressed to an AI model (an
"ignore previous instructions", a "system note", a note to AI assistants, a line
spoken as "Assistant:") from its sentence to the end of its paragraph, and says so
in its place. The patterns name the addressee or the override, not a topic: a policy
*about* AI assistants or a "do not ignore the safety instructions" stays.
"""

from __future__ import annotations

import re

_BLOCK_TAG = re.compile(r"<\s*(/?)\s*(sources|passages)\s*>", re.IGNORECASE)
_LABEL = re.compile(r"\[\s*([SP])\s*(\d+)\s*\]", re.IGNORECASE)
_ADDRESSED_TO_MODEL = re.compile(
    r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+)?(?:the\s+|your\s+)?"
    r"(?:previous|prior|above|earlier|preceding|other|existing)\s+(?:instructions|rules|prompts?)\b"
    r"|\bsystem\s+(?:note|prompt|message|instruction)s?\s*(?::|to\b|for\b)"
    r"|\b(?:note|message|instructions?|hinweis)\s+(?:to|for|an)\s+(?:the\s+|all\s+|den\s+|die\s+)?"
    r"(?:ai|llms?|language\s+models?|chat\s?bots?|(?:ai|virtual|digital)\s+assistants?|assistenten)\b"
    r"|(?:^|(?<=[.!?:])\s+)assistant\s*:",
    re.IGNORECASE | re.MULTILINE,
)
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+|\n)")
WITHHELD = "(text addressed to AI assistants withheld)"


def fence(text: str) -> str:
    """``text`` with prompt block tags and source/passage labels defused (``</sources>`` -> ``(/sources)``)."""
    text = _BLOCK_TAG.sub(lambda m: f"({m.group(1)}{m.group(2)})", text)
    return _LABEL.sub(lambda m: f"({m.group(1)}{m.group(2)})", text)


def withhold_instructions(text: str) -> str:
    """``text`` with every paragraph cut at the sentence where it starts addressing an AI model."""
    paragraphs = text.split("\n\n")
    for i, paragraph in enumerate(paragraphs):
        match = _ADDRESSED_TO_MODEL.search(paragraph)
        if match is None:
            continue
        start = max((m.end() for m in _SENTENCE_START.finditer(paragraph, 0, match.start() + 1)), default=0)
        kept = paragraph[: min(start, match.start())]
        paragraphs[i] = kept + ("" if not kept or kept[-1].isspace() else " ") + WITHHELD
    return "\n\n".join(paragraphs)


def as_data(text: str) -> str:
    """Document text for a prompt: what addresses the model withheld, the prompt's structure defused."""
    return fence(withhold_instructions(text))
