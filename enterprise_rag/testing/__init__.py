"""Deterministic fakes for tests; injected through constructors, never switched on in production code."""

from enterprise_rag.testing.fake_llm import ScriptedLLM

__all__ = ["ScriptedLLM"]
