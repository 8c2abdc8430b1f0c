"""Document text is data: how it is put into a prompt so that it can neither forge the prompt's
structure nor pass for an instruction, and the signal that it tries to speak to the model.

Two layers, none of which depends on how an injection is worded:

* **A boundary the text cannot forge.** Every block of document text opens with
  ``<<<name id>>>`` and closes with ``<<<end name id>>>``, where ``id`` is an HMAC of the block's
  content under a key drawn at random when the process starts. An author cannot know the id, so
  cannot close the block early or open a new one; the same content gives the same id, so every call
  about one question shares a byte-identical prefix (a local server reads the sources once).
* **Structure defused.** :func:`fence` rewrites the tokens the prompt itself uses (source and
  passage labels such as ``[S1]``, block tags, the boundary's ``<<<``) into look-alikes it never
  uses, and leaves every other character as it was.

The rules of every prompt state the hierarchy: their own instructions, then the user's question;
text inside a block is quoted material to answer from, never an instruction. Whether a model
followed one anyway is checked on its answer, in code, by the verification of each sentence
against its sources.

:func:`addresses_model` (text that speaks to an AI model: an "ignore previous instructions", a
"system note", a note to AI assistants, a line spoken as "Assistant:") is only a signal for the
trace: a phrase list never sees the phrasings it was not written for, so it defends nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

_KEY = secrets.token_bytes(32)
_BLOCK_TAG = re.compile(r"<\s*(/?)\s*(sources|passages)\s*>", re.IGNORECASE)
_BOUNDARY = re.compile(r"<{3,}|>{3,}")
_LABEL = re.compile(r"\[\s*([SPL])\s*(\d+)\s*\]", re.IGNORECASE)
_ADDRESSED_TO_MODEL = re.compile(
    r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+)?(?:the\s+|your\s+)?"
    r"(?:previous|prior|above|earlier|preceding|other|existing)\s+(?:instructions|rules|prompts?)\b"
    r"|\bsystem\s+(?:note|prompt|message|instruction)s?\s*(?::|to\b|for\b)"
    r"|\b(?:note|message|instructions?|hinweis)\s+(?:to|for|an)\s+(?:the\s+|all\s+|den\s+|die\s+)?"
    r"(?:ai|llms?|language\s+models?|chat\s?bots?|(?:ai|virtual|digital)\s+assistants?|assistenten)\b"
    r"|(?:^|(?<=[.!?:])\s+)assistant\s*:",
    re.IGNORECASE | re.MULTILINE,
)


def fence(text: str) -> str:
    """``text`` with the prompt's own tokens defused: ``[S1]`` -> ``(S1)``, ``</sources>`` -> ``(/sources)``,
    ``<<<`` -> ``<<``."""
    text = _BLOCK_TAG.sub(lambda m: f"({m.group(1)}{m.group(2)})", text)
    text = _BOUNDARY.sub(lambda m: m.group(0)[:2], text)
    return _LABEL.sub(lambda m: f"({m.group(1)}{m.group(2)})", text)


def block_id(body: str) -> str:
    """The id of a data block: unforgeable without the process key, the same for the same content."""
    return hmac.new(_KEY, body.encode("utf-8"), hashlib.sha256).hexdigest()[:16]


def data_block(name: str, body: str) -> str:
    """``body`` (already fenced) between the opening and closing boundary of block ``name``."""
    bid = block_id(body)
    return f"<<<{name} {bid}>>>\n{body}\n<<<end {name} {bid}>>>"


def block_body(prompt: str, name: str) -> str:
    """The body of block ``name`` in ``prompt`` (the inverse of :func:`data_block`)."""
    match = re.search(rf"<<<{name} (\w+)>>>\n(.*)\n<<<end {name} \1>>>", prompt, re.DOTALL)
    if match is None:
        raise ValueError(f"no {name} block in the prompt")
    return match.group(2)


def without_block_ids(prompt: str) -> str:
    """``prompt`` with the ids of its data blocks replaced by ``*``: its wording, as a cache key may hash it
    (the ids change with the process key)."""
    return re.sub(r"<<<(end )?(\w+) [0-9a-f]{16}>>>", r"<<<\1\2 *>>>", prompt)


def addresses_model(text: str) -> bool:
    """Whether ``text`` holds a phrase that speaks to an AI model: a trace signal, not a defence."""
    return _ADDRESSED_TO_MODEL.search(text) is not None
