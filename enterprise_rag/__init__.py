"""enterprise_rag: permission-scoped, cited, self-correcting RAG on LlamaIndex and PostgreSQL."""

from enterprise_rag.errors import (
    ConfigError,
    IngestError,
    LLMError,
    MissingExtraError,
    ModelError,
    PermissionDeniedError,
    RagError,
    StoreError,
    WebSearchError,
)
from enterprise_rag.principal import Principal
from enterprise_rag.rag import EnterpriseRAG

__all__ = [
    "ConfigError",
    "EnterpriseRAG",
    "IngestError",
    "LLMError",
    "MissingExtraError",
    "ModelError",
    "PermissionDeniedError",
    "Principal",
    "RagError",
    "StoreError",
    "WebSearchError",
]
__version__ = "0.1.0"
