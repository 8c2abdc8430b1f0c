"""LLM query transforms: standalone rewrite of a follow-up, multi-query expansion, HyDE.

Each is optional and measured in ``benchmarks/retrieval.py``. The chat history
and question are untrusted text: they are passed as data inside the user
message, never as instructions.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from llama_index.core.llms import LLM, ChatMessage, MessageRole

from enterprise_rag.schema.sources import History

logger = logging.getLogger(__name__)

_STANDALONE = (
    "You rewrite a follow-up question from a conversation into one standalone question that can be "
    "understood without the conversation. Keep every specific name, number and term. Do not answer it. "
    "Reply with the question only."
)
_EXPAND = (
    "Write {n} different search queries that would find documents answering the question. Use "
    "different wording and likely terms from such documents. One query per line, no numbering."
)
_HYDE = (
    "Write a short passage (3-4 sentences) from a company document that would answer the question. "
    "Write it as the document would, without hedging."
)


def history_text(history: History, turns: int = 6) -> str:
    lines = []
    for turn in list(history)[-turns:]:
        role = str(turn.get("role", "user"))
        content = str(turn.get("content", "")).strip()
        if content:
            lines.append(f"{role}: {content}")
    return "\n".join(lines)


def concatenated_query(question: str, history: History) -> str:
    """A no-LLM standalone query: the earlier user turns followed by the question."""
    asked = [str(t.get("content", "")) for t in history if t.get("role") == "user"]
    return " ".join([*asked[-2:], question]).strip()


def _ask(llm: LLM, system: str, user: str, max_tokens: int = 128) -> str:
    response = llm.chat(
        [ChatMessage(role=MessageRole.SYSTEM, content=system), ChatMessage(role=MessageRole.USER, content=user)],
        max_tokens=max_tokens,
    )
    return (response.message.content or "").strip()


def _one_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return re.sub(r"^(standalone question|question)\s*:\s*", "", line, flags=re.I).strip().strip('"')


def standalone_question(llm: LLM | None, question: str, history: History) -> tuple[str, dict[str, Any]]:
    """Rewrite ``question`` given ``history``; falls back to concatenation if the LLM fails.

    Returns the query and a trace entry saying how it was made.
    """
    if not history:
        return question, {"method": "none"}
    if llm is not None:
        try:
            rewritten = _one_line(
                _ask(llm, _STANDALONE, f"Conversation:\n{history_text(history)}\n\nFollow-up question: {question}")
            )
            if 3 <= len(rewritten) <= 4 * len(question) + 400:
                return rewritten, {"method": "llm", "query": rewritten}
        except Exception as exc:  # fail-open: retrieval still works without the rewrite
            logger.warning("standalone rewrite failed, using concatenation: %s", exc)
    query = concatenated_query(question, history)
    return query, {"method": "concatenation", "query": query}


def expand_queries(llm: LLM, question: str, n: int = 3) -> list[str]:
    """``n`` alternative phrasings of ``question`` (multi-query expansion)."""
    text = _ask(llm, _EXPAND.format(n=n), f"Question: {question}", max_tokens=160)
    lines = [re.sub(r"^\s*(?:[-*]|\d+[.)])\s*", "", ln).strip() for ln in text.splitlines()]
    return [ln for ln in lines if len(ln) > 3][:n]


def hypothetical_document(llm: LLM, question: str) -> str:
    """A hypothetical answer passage to embed instead of the question (HyDE)."""
    return _ask(llm, _HYDE, f"Question: {question}", max_tokens=160)
