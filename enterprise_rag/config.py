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
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from enterprise_rag.errors import ConfigError

ENV_PREFIX = "ENTERPRISE_RAG_"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatabaseSettings(_Section):
    """Where the store lives. No DSN means the embedded PostgreSQL in the data dir."""

    dsn: SecretStr | None = Field(None, description="PostgreSQL DSN of an external server; unset = embedded.")
    pool_min_size: int = Field(1, ge=0, description="Connections kept open in the pool.")
    pool_max_size: int = Field(8, ge=1, description="Upper bound of the connection pool.")
    connect_timeout_s: float = Field(10.0, gt=0, description="Seconds to wait for a connection.")
    text_search_config: str = Field(
        "english", pattern=r"^[a-z_]+$", description="PostgreSQL text search configuration for full-text."
    )
    embedded_shared_buffers_mb: int = Field(
        1024,
        ge=0,
        description="shared_buffers of the embedded PostgreSQL in MB (at most a quarter of RAM); 0 = PostgreSQL's"
        " default (128 MB). Ignored for an external server.",
    )


class EmbeddingSettings(_Section):
    """The embedding model used for chunks and questions."""

    provider: Literal["local", "openai"] = Field("local", description="local = MiniLM int8 ONNX; openai.")
    model: str = Field("all-MiniLM-L6-v2", description="Model name (OpenAI: e.g. text-embedding-3-small).")
    dimensions: int = Field(384, ge=8, le=4000, description="Vector size; must match the model.")
    batch_size: int = Field(32, ge=1, le=2048, description="Texts per embedding call.")
    api_key: SecretStr | None = Field(None, description="OpenAI API key (else OPENAI_API_KEY).")
    api_base: str | None = Field(None, description="OpenAI-compatible base URL.")


class LLMRoleSettings(_Section):
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


class LLMSettings(_Section):
    generator: LLMRoleSettings = Field(default_factory=LLMRoleSettings, description="Answer writer.")
    grader: LLMRoleSettings = Field(
        default_factory=lambda: LLMRoleSettings(max_tokens=384), description="Grading and checks."
    )


class LocalModelSettings(_Section):
    """The local GGUF model run in-process by xllamacpp."""

    path: Path | None = Field(None, description="A GGUF file to use instead of the packaged model.")
    context_window: int = Field(8192, ge=512, description="Context length (tokens) of the local server.")
    threads: int | None = Field(
        None, ge=1, description="CPU threads; unset = the LLM takes the cores this process may use (its affinity)."
    )


class RerankerSettings(_Section):
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


class WebSearchSettings(_Section):
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


class IngestSettings(_Section):
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


class RetrievalSettings(_Section):
    top_k: int = Field(5, ge=1, description="Passages returned by retrieve() by default.")
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


# Fitted by benchmarks/grading.py (local grader, pooled dev scenarios + SciFact; see that script's docstring).
FITTED_GRADE_THRESHOLDS: dict[str, tuple[float, float]] = {"qwen2.5-coder-1.5b-instruct-q4_k_m": (0.4, 0.5)}
# MiniLM similarities (the local int8 model): under 0.12, passages were almost never relevant.
FITTED_GRADE_FLOORS: dict[str, float] = {"all-MiniLM-L6-v2-onnx-int8": 0.12}
# benchmarks/grounding.py on the dev documents: the threshold maximising the worst of faithful claims accepted
# and each perturbed family rejected (0.88 there; held out on the public documents, faithful 43/49 accepted).
FITTED_SUPPORT_THRESHOLDS: dict[str, float] = {"qwen2.5-coder-1.5b-instruct-q4_k_m": 0.658}
# benchmarks/addressee.py on the dev documents, each paragraph alone: planted paragraphs 3/4 set aside, others
# 74/74 kept (held out on the public documents: 1/1 and 31/32).
FITTED_ADDRESSEE_THRESHOLDS: dict[str, float] = {"qwen2.5-coder-1.5b-instruct-q4_k_m": -0.182}
DEFAULT_COMPENSATIONS = ("question_codes",)


class WorkflowSettings(_Section):
    """Bounds and thresholds of the corrective answer workflow (every loop has a cap)."""

    top_k: int = Field(5, ge=1, le=20, description="Passages retrieved per attempt and graded.")
    max_sources: int = Field(4, ge=1, le=20, description="Sources given to the generator at most.")
    grade_thresholds: dict[str, tuple[float, float]] = Field(
        default_factory=lambda: dict(FITTED_GRADE_THRESHOLDS),
        description="Per grader model name (as the model reports it, e.g. llm.grader.model): the (partial, yes)"
        " thresholds on its probability of answering 'yes' (p(yes) >= yes: yes; >= partial: partial; else no)."
        " The local model's were fitted by benchmarks/grading.py on the dev scenarios and SciFact.",
    )
    grade_thresholds_fallback: tuple[float, float] = Field(
        (0.1, 0.5),
        description="(partial, yes) for a grader model not in grade_thresholds: yes where the model's own"
        " choice is yes, partial down to a tenth (an uncalibrated model keeps doubtful passages).",
    )
    grade_floor: dict[str, float] = Field(
        default_factory=lambda: dict(FITTED_GRADE_FLOORS),
        description="Per embedding model name (as the model reports it): the dense similarity under which a"
        " passage is rejected without an LLM call. A model not listed has no floor (similarities are not"
        " comparable across models).",
    )
    min_yes: int = Field(1, ge=1, description="Passages graded yes needed to proceed without correction.")
    max_query_rewrites: int = Field(2, ge=0, le=5, description="Rewrite-and-retrieve rounds before web fallback.")
    max_revisions: int = Field(1, ge=0, le=5, description="Revisions of the sentences that failed verification.")
    link_allow_list: list[str] = Field(
        default_factory=list,
        description="Web hosts (e.g. intranet.example, subdomains included) an answer may link to though no cited"
        " source gives the link. Any other URL or e-mail address in an answer must be given by a cited source.",
    )
    refine_floor: float = Field(
        0.1, ge=-1, le=1, description="Strips below this similarity and sharing no word with the question are dropped."
    )
    answer_max_tokens: int = Field(
        640, ge=32, description="Tokens for an answer (a cap: a list answer cut off at 320 lost its last items)."
    )
    evidence_units: int = Field(
        8,
        ge=1,
        le=32,
        description="Evidence units (a line, a table row, a whole list) of the sources put to the"
        " grader per round, the best by rank.",
    )
    max_evidence: int = Field(6, ge=1, le=20, description="Graded evidence units an answer is written from at most.")
    evidence_margin: float = Field(
        0.05, ge=0, le=1, description="Evidence units within this much of the best p(yes) are written from."
    )
    web_phrasings: int = Field(3, ge=1, le=5, description="Query phrasings searched on a full web fallback.")
    web_confidence_cap: float = Field(
        0.5, ge=0, le=1, description="Highest confidence of an answer resting on web sources with weak corpus hits."
    )
    support_thresholds: dict[str, float] = Field(
        default_factory=lambda: dict(FITTED_SUPPORT_THRESHOLDS),
        description="Per judge model name: the p(yes) at which a claim counts as stated by its lines."
        " The local model's was fitted by benchmarks/grounding.py on the dev scenarios.",
    )
    support_threshold_fallback: float = Field(0.5, ge=0, le=1, description="The same for a model not listed.")
    addressee_thresholds: dict[str, float] = Field(
        default_factory=lambda: dict(FITTED_ADDRESSEE_THRESHOLDS),
        description="Per grader model name: the score (p(yes) written to an AI model less p(yes) written for its"
        " readers) at which a paragraph of evidence is set aside. Fitted by benchmarks/addressee.py.",
    )
    addressee_threshold_fallback: float = Field(0.0, ge=-1, le=1, description="The same for a model not listed.")
    web_support_margin: float = Field(
        0.2, ge=0, le=1, description="Added to the support threshold for claims resting on web sources (stricter)."
    )
    compensations: list[str] = Field(
        default_factory=lambda: list(DEFAULT_COMPENSATIONS),
        description="Small-model aids switched on (enterprise_rag.answer.compensations; see docs/answers.md for"
        " what each does and its measured effect).",
    )
    llm_timeout_s: float = Field(240.0, gt=0, description="Seconds before one LLM call is abandoned and retried.")
    llm_max_retries: int = Field(2, ge=0, le=5, description="Retries of a failed LLM call, with backoff.")
    llm_backoff_s: float = Field(1.0, ge=0, description="First backoff between retries (doubles each time).")

    @field_validator("grade_thresholds_fallback")
    @classmethod
    def _check_fallback(cls, value: tuple[float, float]) -> tuple[float, float]:
        return _ordered_thresholds("fallback", value)

    @field_validator("grade_thresholds")
    @classmethod
    def _check_thresholds(cls, value: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        return {model: _ordered_thresholds(model, pair) for model, pair in value.items()}

    def grade_thresholds_for(self, model: str) -> tuple[float, float]:
        """(partial, yes) thresholds on p(yes) for this grader model; the fallback for a model not listed."""
        return self.grade_thresholds.get(model, self.grade_thresholds_fallback)

    def support_threshold_for(self, model: str) -> float:
        """The p(yes) threshold of claim support for this judge model; the fallback for a model not listed."""
        return self.support_thresholds.get(model, self.support_threshold_fallback)

    def addressee_threshold_for(self, model: str) -> float:
        """The score at which a paragraph of evidence counts as written to an AI model, for this grader model."""
        return self.addressee_thresholds.get(model, self.addressee_threshold_fallback)

    def grade_floor_for(self, model: str) -> float | None:
        """The dense-similarity floor for this embedding model; None (no floor) for a model not listed."""
        return self.grade_floor.get(model)


def _ordered_thresholds(model: str, pair: tuple[float, float]) -> tuple[float, float]:
    partial, yes = pair
    if not 0.0 <= partial <= yes <= 1.0:
        raise ValueError(f"grade thresholds of {model}: need 0 <= partial <= yes <= 1, got {pair}")
    return (float(partial), float(yes))


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
