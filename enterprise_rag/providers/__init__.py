"""Model and service providers: embeddings, LLMs, rerankers, web search, built from config."""

from enterprise_rag.providers.registry import Providers

__all__ = ["Providers"]
