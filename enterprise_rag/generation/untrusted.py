"""Document text is data: before it goes into a prompt, it must not be able to forge the prompt's structure.

A passage that contains ``</sources>`` or a line like ``[S9] (source: ...)`` would
otherwise close the sources block or add a source of its own, and its text would
then sit where the model expects rules. :func:`fence` rewrites exactly those
structural tokens (block tags and ``[S1]``/``[P1]`` labels) into look-alikes the
prompt never uses, and leaves every other character as it was.
"""

from __future__ import annotations

import re

_BLOCK_TAG = re.compile(r"<\s*(/?)\s*(sources|passages)\s*>", re.IGNORECASE)
_LABEL = re.compile(r"\[\s*([SP])\s*(\d+)\s*\]", re.IGNORECASE)


def fence(text: str) -> str:
    """``text`` with prompt block tags and source/passage labels defused (``</sources>`` -> ``(/sources)``)."""
    text = _BLOCK_TAG.sub(lambda m: f"({m.group(1)}{m.group(2)})", text)
    return _LABEL.sub(lambda m: f"({m.group(1)}{m.group(2)})", text)
