"""Deterministic fakes for tests; injected through constructors, never switched on in production code."""

from enterprise_rag.testing.fake_llm import (
    ScriptedLLM,
    TokenProbabilities,
    written_for_readers,
    written_to_the_model_if,
    yes_probability,
)

__all__ = ["ScriptedLLM", "TokenProbabilities", "written_for_readers", "written_to_the_model_if", "yes_probability"]
