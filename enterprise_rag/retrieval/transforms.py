"""LLM query transforms: standalone rewrite of a follow-up, multi-query expansion, HyDE.

Each is optional and measured in ``benchmarks/retrieval.py``. The chat history
and question are untrusted text: they are passed as data inside the user
message, never as instructions. The standalone rewrite is the one both the
retriever and the answer workflow use; each passes its own way of calling the
model (:data:`Chat`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from llama_index.core.llms import LLM, ChatMessage, MessageRole

from enterprise_rag.errors import brief
from enterprise_rag.llm.prompts import EXPAND_RULES, HYDE_RULES, standalone_messages
from enterprise_rag.schema.sources import History
from enterprise_rag.text import LIST_ITEM

logger = logging.getLogger(__name__)

Chat = Callable[[list[ChatMessage], int], str]
"""Sends messages with a completion token budget and returns the reply text; raises when the call fails."""

STANDALONE_MAX_TOKENS = 96


def llm_chat(llm: LLM) -> Chat:
    """:data:`Chat` straight to a LlamaIndex LLM."""

    def chat(messages: list[ChatMessage], max_tokens: int) -> str:
        return llm.chat(messages, max_tokens=max_tokens).message.content or ""

    return chat


def concatenated_query(question: str, history: History) -> str:
    """The user's own words: the user turns of the conversation followed by the question.

    The no-LLM standalone query, and the only text a web search may send out."""
    asked = [str(t.get("content", "")) for t in history if t.get("role") == "user"]
    return " ".join([*asked, question])


def standalone_question(chat: Chat | None, question: str, history: History) -> tuple[str, dict[str, Any]]:
    """Rewrite ``question`` given ``history``: the first line of the reply, unquoted (the question itself
    when the reply is empty); concatenation when there is no model or its call fails.

    Returns the query and a trace entry saying how it was made.
    """
    if not history:
        return question, {"method": "none"}
    if chat is not None:
        try:
            reply = chat(standalone_messages(question, history), STANDALONE_MAX_TOKENS)
        except Exception as exc:  # fail-open: retrieval still works without the rewrite
            logger.warning("standalone rewrite failed, using concatenation: %s", brief(exc))
            logger.debug("standalone rewrite: %s", exc)
        else:
            line = next((ln.strip() for ln in reply.splitlines() if ln.strip()), "")
            query = line.strip('"') or question
            return query, {"method": "llm", "query": query}
    query = concatenated_query(question, history)
    return query, {"method": "concatenation", "query": query}


def _ask(llm: LLM, system: str, user: str, max_tokens: int = 128) -> str:
    messages = [ChatMessage(role=MessageRole.SYSTEM, content=system), ChatMessage(role=MessageRole.USER, content=user)]
    return llm_chat(llm)(messages, max_tokens).strip()


def expand_queries(llm: LLM, question: str, n: int = 3) -> list[str]:
    """``n`` alternative phrasings of ``question`` (multi-query expansion)."""
    text = _ask(llm, EXPAND_RULES.format(n=n), f"Question: {question}", max_tokens=160)
    lines = [LIST_ITEM.sub("", ln).strip() for ln in text.splitlines()]
    return [ln for ln in lines if len(ln) > 3][:n]


def hypothetical_document(llm: LLM, question: str) -> str:
    """A hypothetical answer passage to embed instead of the question (HyDE)."""
    return _ask(llm, HYDE_RULES, f"Question: {question}", max_tokens=160)
