"""Every LLM rewrite of a query, in one module: the standalone follow-up, a new phrasing, extra phrasings,
multi-query expansion, HyDE.

Each calls the model through an :class:`~enterprise_rag.llm.caller.LLMCaller` (its timeout, retries,
accounting and, in a query, its trace) and reads one-line replies with
:func:`~enterprise_rag.llm.prompts.first_line`. The chat history and the question are untrusted text:
they are passed as data inside the user message, never as instructions. The optional stages are
measured in ``benchmarks/retrieval.py``.
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index.core.llms import ChatMessage, MessageRole

from enterprise_rag.errors import brief
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.llm.prompts import EXPAND_RULES, HYDE_RULES, first_line, rewrite_messages, standalone_messages
from enterprise_rag.schema.sources import History
from enterprise_rag.text import LIST_ITEM

logger = logging.getLogger(__name__)

STANDALONE_MAX_TOKENS = 96
REWRITE_MAX_TOKENS = 64


def concatenated_query(question: str, history: History) -> str:
    """The user's own words: the user turns of the conversation followed by the question.

    The no-LLM standalone query, and the only text a web search may send out."""
    asked = [str(t.get("content", "")) for t in history if t.get("role") == "user"]
    return " ".join([*asked, question])


def standalone_question(caller: LLMCaller | None, question: str, history: History) -> tuple[str, dict[str, Any]]:
    """Rewrite ``question`` given ``history``: the first line of the reply, unquoted (the question itself
    when the reply is empty); concatenation when there is no model or its call fails.

    Returns the query and a trace entry saying how it was made.
    """
    if not history:
        return question, {"method": "none"}
    if caller is not None:
        try:
            reply = caller.call("grader", "standalone", standalone_messages(question, history),
                                max_tokens=STANDALONE_MAX_TOKENS)  # fmt: skip
        except Exception as exc:  # fail-open: retrieval still works without the rewrite
            logger.warning("standalone rewrite failed, using concatenation: %s", brief(exc))
            logger.debug("standalone rewrite: %s", exc)
        else:
            query = first_line(reply) or question
            return query, {"method": "llm", "query": query}
    query = concatenated_query(question, history)
    return query, {"method": "concatenation", "query": query}


def rewrite_query(caller: LLMCaller, query: str, previous: list[str]) -> str:
    """One new phrasing of ``query``, asked to differ from ``previous``; "" when the reply has none.
    Raises :class:`~enterprise_rag.errors.LLMError` when the call fails."""
    reply = caller.call("grader", "rewrite", rewrite_messages(query, previous), max_tokens=REWRITE_MAX_TOKENS)
    return first_line(reply)


def more_phrasings(caller: LLMCaller, query: str, n: int) -> list[str]:
    """Up to ``n`` new phrasings of ``query``, each asked to differ from the query and those before it."""
    phrasings: list[str] = []
    for _ in range(n):
        line = rewrite_query(caller, query, [query, *phrasings])
        if line and line not in phrasings:
            phrasings.append(line)
    return phrasings


def _ask(caller: LLMCaller, name: str, system: str, question: str) -> str:
    messages = [ChatMessage(role=MessageRole.SYSTEM, content=system),
                ChatMessage(role=MessageRole.USER, content=f"Question: {question}")]  # fmt: skip
    return str(caller.call("grader", name, messages, max_tokens=160)).strip()


def expand_queries(caller: LLMCaller, question: str, n: int = 3) -> list[str]:
    """``n`` alternative phrasings of ``question`` (multi-query expansion)."""
    reply = _ask(caller, "expand", EXPAND_RULES.format(n=n), question)
    lines = [LIST_ITEM.sub("", ln).strip() for ln in reply.splitlines()]
    return [ln for ln in lines if len(ln) > 3][:n]


def hypothetical_document(caller: LLMCaller, question: str) -> str:
    """A hypothetical answer passage to embed instead of the question (HyDE)."""
    return _ask(caller, "hyde", HYDE_RULES, question)
