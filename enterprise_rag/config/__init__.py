"""Configuration: one pydantic-settings model, from YAML plus environment overrides.

Precedence, highest first: keyword arguments, environment variables
(``ENTERPRISE_RAG_`` prefix, ``__`` between nested names, e.g.
``ENTERPRISE_RAG_DATABASE__DSN``), the YAML file, the defaults below.
Secrets are :class:`~pydantic.SecretStr`: they never appear in reprs, logs or
:meth:`RagSettings.public_dict`.
"""

from __future__ import annotations

import os
import platform
import re
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from enterprise_rag.config.section import Section
from enterprise_rag.config.workflow import FITTED_GRADE_THRESHOLDS as FITTED_GRADE_THRESHOLDS
from enterprise_rag.config.workflow import WorkflowSettings
from enterprise_rag.errors import ConfigError

ENV_PREFIX = "ENTERPRISE_RAG_"


class DatabaseSettings(Section):
    """Where the store lives. No DSN means the embedded PostgreSQL in the data dir."""

    dsn: SecretStr | None = Field(None, description="PostgreSQL DSN of an external server; unset = embedded.")
    pool_min_size: int = Field(1, ge=0, description="Connections kept open in the pool.")
    pool_max_size: int = Field(8, ge=1, description="Upper bound of the connection pool.")
    connect_timeout_s: float = Field(10.0, gt=0, description="Seconds to wait for a connection.")
    app_connection_limit: int = Field(
        64, ge=1, description="Most sessions the store's login role may hold at once, over every process."
    )
    text_search_config: str = Field(
        "english", pattern=r"^[a-z_]+$", description="PostgreSQL text search configuration for full-text."
    )
    embedded_shared_buffers_mb: int = Field(
        1024,
        ge=0,
        description="shared_buffers of the embedded PostgreSQL in MB (at most a quarter of RAM); 0 = PostgreSQL's"
        " default (128 MB). Ignored for an external server.",
    )


class EmbeddingSettings(Section):
    """The embedding model used for chunks and questions."""

    provider: Literal["local", "openai"] = Field("local", description="local = MiniLM int8 ONNX; openai.")
    model: str = Field("all-MiniLM-L6-v2", description="Model name (OpenAI: e.g. text-embedding-3-small).")
    dimensions: int = Field(384, ge=8, le=4000, description="Vector size; must match the model.")
    batch_size: int = Field(32, ge=1, le=2048, description="Texts per embedding call.")
    api_key: SecretStr | None = Field(None, description="OpenAI API key (else OPENAI_API_KEY).")
    api_base: str | None = Field(None, description="OpenAI-compatible base URL.")


class LLMRoleSettings(Section):
    """One LLM role: the generator writes answers, the grader grades and checks."""

    provider: Literal["local", "openai"] = Field("local", description="local = in-process GGUF; openai.")
    model: str = Field("qwen2.5-coder-1.5b-instruct-q4_k_m", description="Model name.")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int = Field(512, ge=1, description="Upper bound of generated tokens per call.")
    timeout_s: float = Field(180.0, gt=0, description="Seconds before one call is abandoned.")
    max_retries: int = Field(
        2, ge=0, le=10, description="HTTP retries of one call (OpenAI: 429, 5xx, timeout; total = this + 1)."
    )
    api_key: SecretStr | None = Field(None, description="OpenAI API key (else OPENAI_API_KEY).")
    api_base: str | None = Field(
        None, description="OpenAI-compatible base URL (vLLM, Ollama, llama.cpp, a gateway); any model name."
    )
    context_window: int | None = Field(
        None, ge=512, description="openai: the model's context tokens (unset: OpenAI's own figure, else 8192)."
    )
    chat_model: bool = Field(True, description="openai: the model takes chat messages (false: the completions API).")


class LLMSettings(Section):
    generator: LLMRoleSettings = Field(default_factory=LLMRoleSettings, description="Answer writer.")
    grader: LLMRoleSettings = Field(
        default_factory=lambda: LLMRoleSettings(max_tokens=384), description="Grading and checks."
    )


class LocalModelSettings(Section):
    """The local GGUF model run in-process by xllamacpp."""

    path: Path | None = Field(None, description="A GGUF file to use instead of the packaged model.")
    context_window: int = Field(8192, ge=512, description="Context length (tokens) of the local server.")
    threads: int | None = Field(
        None, ge=1, description="CPU threads; unset = the LLM takes the cores this process may use (its affinity)."
    )


class RerankerSettings(Section):
    provider: Literal["none", "cohere", "llm"] = Field(
        "none", description="none keeps the fused order; cohere; llm scores the head with the grader LLM."
    )
    model: str = Field("rerank-v3.5", description="Cohere rerank model.")
    top_n: int = Field(6, ge=1, description="Passages kept after a Cohere rerank.")
    timeout_s: float = Field(30.0, gt=0, description="Seconds before one Cohere request is abandoned.")
    api_key: SecretStr | None = Field(None, description="Cohere API key (else COHERE_API_KEY).")
    llm_candidates: int = Field(
        12, ge=1, description="llm: leading fused candidates scored; the rest keep their order."
    )
    llm_batch_size: int = Field(12, ge=1, description="llm: passages per scoring call.")
    llm_passage_chars: int = Field(280, ge=50, description="llm: characters of each passage in the prompt.")


_DOMAIN = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$")


def normalize_domain(value: str) -> str:
    """A bare, lower-case domain name (``*.`` / leading dot / trailing dot dropped) or :class:`ValueError`.

    >>> normalize_domain("*.Docs.Python.org.")
    'docs.python.org'
    """
    domain = value.strip().lower()
    domain = domain.removeprefix("*.").lstrip(".").rstrip(".")
    if not _DOMAIN.match(domain):
        raise ValueError(
            f"{value!r} is not a bare domain name: write e.g. docs.python.org (no scheme, path, port or wildcard)"
        )
    return domain


class WebSearchSettings(Section):
    """Web fallback. Tavily is used only when the asker is in an egress group; curated is local.

    ``tavily`` sends the question to the Tavily API (it leaves the machine), so it
    needs ``egress_groups``; ``curated`` searches a local folder of vetted
    documents and needs no egress permission.
    """

    provider: Literal["disabled", "tavily", "curated"] = Field(
        "disabled", description="Web fallback source: disabled, tavily (API) or curated (local folder)."
    )
    api_key: SecretStr | None = Field(None, description="Tavily API key (else TAVILY_API_KEY).")
    curated_dir: Path | None = Field(
        None, description="Folder of curated .md/.txt/.html sources; required when provider is curated."
    )
    allowed_domains: list[str] = Field(default_factory=list, description="Domain allow-list for results.")
    egress_groups: list[str] = Field(
        default_factory=list, description="Groups whose questions may leave the machine (empty = nobody)."
    )
    max_results: int = Field(5, ge=1, le=20, description="Results per web query.")

    @field_validator("allowed_domains")
    @classmethod
    def _bare_domains(cls, domains: list[str]) -> list[str]:
        return list(dict.fromkeys(normalize_domain(d) for d in domains))

    @model_validator(mode="after")
    def _curated_needs_a_folder(self) -> WebSearchSettings:
        if self.provider == "curated" and self.curated_dir is None:
            raise ValueError(
                "web_search.curated_dir is required when web_search.provider is curated "
                "(a folder of curated .md/.txt/.html documents)"
            )
        return self


class IngestSettings(Section):
    chunk_sizes: list[int] = Field(
        default_factory=lambda: [1024, 384, 128], description="Hierarchy chunk sizes in tokens, top first."
    )
    chunk_overlap: int = Field(16, ge=0, description="Token overlap between sibling chunks.")
    max_file_mb: float = Field(25.0, gt=0, description="Larger files are refused with a clear reason.")
    write_batch_size: int = Field(512, ge=1, description="Nodes per write transaction.")

    @field_validator("chunk_sizes")
    @classmethod
    def _descending(cls, sizes: list[int]) -> list[int]:
        if not sizes or any(a <= b for a, b in zip(sizes, sizes[1:], strict=False)) or min(sizes) < 16:
            raise ValueError("must be a non-empty, strictly decreasing list of sizes >= 16")
        return sizes


class RetrievalSettings(Section):
    top_k: int = Field(
        5, ge=1, description="Passages returned by retrieve() by default, and retrieved per attempt and graded"
        " by query()."
    )
    candidates: int = Field(50, ge=1, description="Hits per side (dense, text) before fusion.")
    rrf_k: int = Field(60, ge=1, description="Reciprocal rank fusion constant.")
    dense_weight: float = Field(1.0, ge=0, description="Weight of the dense side in RRF.")
    text_weight: float = Field(1.0, ge=0, description="Weight of the full-text side in RRF.")
    merge_threshold: float = Field(
        0.5, gt=0, le=1, description="Share of a parent's children that must hit for the parent to replace them."
    )
    merge_max_chars: int = Field(
        2400, ge=0, description="Parents longer than this are never merged into (keeps contexts small); 0 = no limit."
    )
    section_window_chars: int = Field(
        1200, ge=0, description="A leaf hit grows with neighbours of its own section up to this many characters."
    )
    superseded: Literal["demote", "exclude", "keep"] = Field(
        "demote", description="How documents with status superseded are treated."
    )
    hnsw_ef_search: int = Field(100, ge=10, description="pgvector hnsw.ef_search.")
    exact_scan_below: int = Field(
        10000,
        ge=0,
        description="Visible chunks under which search starts from the user's scope: the dense side scans them"
        " exactly instead of HNSW, the full-text side joins them instead of checking hits one by one.",
    )
    bm25_k1: float = Field(1.2, ge=0, le=10, allow_inf_nan=False, description="BM25 term-frequency saturation.")
    bm25_b: float = Field(0.75, ge=0, le=1, allow_inf_nan=False, description="BM25 length normalisation.")
    bm25_title_boost: float = Field(
        1.0,
        ge=0,
        le=100,
        allow_inf_nan=False,
        description="Weight of an occurrence in the title/headings breadcrumb relative to one in the body.",
    )
    bm25_max_terms: int = Field(
        32, ge=1, le=64, description="Question lexemes searched at most (those with the highest IDF)."
    )
    bm25_max_postings: int = Field(
        200_000,
        ge=1,
        description="Postings read per question at most: the commonest question lexemes are dropped beyond it.",
    )


class RagSettings(BaseSettings):
    """All settings of one :class:`~enterprise_rag.EnterpriseRAG`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    data_dir: Path | None = Field(None, description="Embedded store, model files and caches; unset = default.")
    database: DatabaseSettings = Field(default_factory=DatabaseSettings, description="Store.")
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings, description="Embeddings.")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="LLM roles.")
    local_model: LocalModelSettings = Field(default_factory=LocalModelSettings, description="Local GGUF.")
    reranker: RerankerSettings = Field(default_factory=RerankerSettings, description="Reranker.")
    web_search: WebSearchSettings = Field(default_factory=WebSearchSettings, description="Web fallback.")
    ingest: IngestSettings = Field(default_factory=IngestSettings, description="Ingestion.")
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings, description="Retrieval.")
    workflow: WorkflowSettings = Field(default_factory=WorkflowSettings, description="Answer workflow.")

    @model_validator(mode="after")
    def _local_embedding_dimension(self) -> RagSettings:
        if self.embedding.provider == "local" and self.embedding.dimensions != 384:
            raise ValueError("embedding.dimensions must be 384 for the local all-MiniLM-L6-v2 model")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _YamlSource(settings_cls))

    def resolved_data_dir(self) -> Path:
        """The data dir: configured, else the platform's user data folder (never under /root as root)."""
        return (self.data_dir or default_data_dir()).expanduser().resolve()

    def public_dict(self) -> dict[str, Any]:
        """Settings as plain data with every secret masked, for logs and ``status``."""
        return self.model_dump(mode="json")


# The YAML file of the load_settings call in progress in this thread or task. pydantic-settings builds
# its sources in a classmethod, so the path of one call reaches them this way, not through the class.
_YAML_PATH: ContextVar[Path | None] = ContextVar("enterprise_rag_yaml_path", default=None)


class _YamlSource(PydanticBaseSettingsSource):
    """Reads the YAML file passed to the :func:`load_settings` call in progress (nothing outside one)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = _YAML_PATH.get()
        if path is None:
            return {}
        return _read_yaml(path)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return data


def load_settings(path: str | Path | None = None, **overrides: Any) -> RagSettings:
    """Load settings from ``path`` (YAML), the environment and ``overrides``.

    Raises :class:`ConfigError` naming the offending field, e.g.
    ``retrieval.rrf_k: Input should be greater than or equal to 1``.
    """
    token = _YAML_PATH.set(Path(path) if path is not None else None)
    try:
        return RagSettings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path)) from None
    finally:
        _YAML_PATH.reset(token)


def _describe(exc: ValidationError, path: str | Path | None) -> str:
    where = f" in {path}" if path else ""
    problems = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        problems.append(f"{field}: {err['msg']}")
    return f"invalid configuration{where}: " + "; ".join(problems)


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/enterprise-rag`` or ``~/.local/share/enterprise-rag``; ``/var/lib`` as root.

    The embedded PostgreSQL opens every parent folder of its data dir to other
    users when run as root, so root never gets a data dir under ``/root``.
    """
    if platform.system() != "Windows" and os.geteuid() == 0:
        return Path("/var/lib/enterprise-rag")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "enterprise-rag"
