"""Query traces in PostgreSQL: steps, decisions, LLM calls; read back per user; resume."""

from enterprise_rag.trace.store import TraceRecorder, TraceStore

__all__ = ["TraceRecorder", "TraceStore"]
