"""enterprise_rag: permission-scoped, cited, self-correcting RAG on LlamaIndex and PostgreSQL."""

from enterprise_rag.offline import use_bundled_caches

use_bundled_caches()

from enterprise_rag.errors import (  # noqa: E402
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
from enterprise_rag.principal import Principal  # noqa: E402
from enterprise_rag.rag import EnterpriseRAG  # noqa: E402

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
