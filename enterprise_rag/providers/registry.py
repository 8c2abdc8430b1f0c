"""One registry from configuration to provider objects.

Each kind (embedding, LLM, reranker, web search) has a dict from the
configured ``provider`` name to a factory. Objects are built on first use and
cached, so constructing :class:`Providers` is free and nothing loads a model or
opens a client that a run does not need. Provider modules are imported here
at module level; each imports its optional extra (onnxruntime, xllamacpp,
openai, cohere, tavily) only when it builds its object.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM

from enterprise_rag.config import LLMRoleSettings, RagSettings
from enterprise_rag.errors import ConfigError
from enterprise_rag.extras import require
from enterprise_rag.providers.callbacks import scope_trace_map
from enterprise_rag.providers.curated_search import CuratedWebSearch
from enterprise_rag.providers.local_embedding import LocalMiniLMEmbedding
from enterprise_rag.providers.local_llm import LocalLlamaLLM
from enterprise_rag.providers.model_files import require_model
from enterprise_rag.providers.openai_llm import bounded_retry_openai, openai_context_window
from enterprise_rag.providers.web_search import EgressPolicy, TavilyWebSearch, WebSearch
from enterprise_rag.retrieval.cohere_rerank import timed_cohere_rerank
from enterprise_rag.retrieval.llm_rerank import LLMPointwiseRerank


def _secret(value: Any, env: str) -> str | None:
    return value.get_secret_value() if value is not None else os.environ.get(env)


def _local_embedding(s: RagSettings, data_dir: Path) -> BaseEmbedding:
    return LocalMiniLMEmbedding(embed_batch_size=s.embedding.batch_size, threads=s.local_model.threads)


def _openai_embedding(s: RagSettings, data_dir: Path) -> BaseEmbedding:
    """OpenAI or any OpenAI-compatible embedding server, under any model name (``OpenAILikeEmbedding``:
    the stock ``OpenAIEmbedding`` accepts only OpenAI's model names)."""
    module = require("llama_index.embeddings.openai_like", "openai")
    e = s.embedding
    return module.OpenAILikeEmbedding(  # type: ignore[no-any-return]
        model_name=e.model,
        # Only OpenAI's text-embedding-3 models take a size; another server may refuse the field.
        dimensions=e.dimensions if e.model.startswith("text-embedding-3") else None,
        embed_batch_size=e.batch_size,
        api_key=_secret(e.api_key, "OPENAI_API_KEY"),
        api_base=e.api_base,
    )


def _local_llm(role: LLMRoleSettings, s: RagSettings, data_dir: Path) -> LLM:
    path = s.local_model.path or require_model(data_dir)
    return LocalLlamaLLM(
        model_path=path,
        model_name=role.model,
        context_window=s.local_model.context_window,
        max_tokens=role.max_tokens,
        temperature=role.temperature,
        timeout_s=role.timeout_s,
        threads=s.local_model.threads,
    )


def _openai_llm(role: LLMRoleSettings, s: RagSettings, data_dir: Path) -> LLM:
    return bounded_retry_openai(
        model=role.model,
        context_window=role.context_window or openai_context_window(role.model),
        is_chat_model=role.chat_model,
        temperature=role.temperature,
        max_tokens=role.max_tokens,
        timeout=role.timeout_s,
        http_max_retries=role.max_retries,
        api_key=_secret(role.api_key, "OPENAI_API_KEY"),
        api_base=role.api_base,
    )


def _cohere_reranker(s: RagSettings, data_dir: Path, grader: Callable[[], LLM]) -> Any:
    require("llama_index.postprocessor.cohere_rerank", "cohere")  # a missing extra is reported before a missing key
    key = _secret(s.reranker.api_key, "COHERE_API_KEY")
    if not key:
        raise ConfigError("reranker.api_key: Cohere rerank needs an API key (or COHERE_API_KEY)")
    return timed_cohere_rerank(
        model=s.reranker.model, top_n=s.reranker.top_n, api_key=key, timeout_s=s.reranker.timeout_s
    )


def _llm_reranker(s: RagSettings, data_dir: Path, grader: Callable[[], LLM]) -> Any:
    r = s.reranker
    return LLMPointwiseRerank(
        llm=grader(), candidates=r.llm_candidates, batch_size=r.llm_batch_size,
        passage_chars=r.llm_passage_chars, timeout_s=s.llm.grader.timeout_s,
    )  # fmt: skip


def _no_reranker(s: RagSettings, data_dir: Path, grader: Callable[[], LLM]) -> None:
    return None


def _tavily_search(s: RagSettings, data_dir: Path) -> WebSearch:
    module = require("tavily", "tavily")
    key = _secret(s.web_search.api_key, "TAVILY_API_KEY")
    if not key:
        raise ConfigError("web_search.api_key: Tavily needs an API key (or TAVILY_API_KEY)")
    return TavilyWebSearch(
        module.TavilyClient(api_key=key),
        allowed_domains=s.web_search.allowed_domains,
        max_results=s.web_search.max_results,
    )


def _curated_search(s: RagSettings, data_dir: Path) -> WebSearch:
    folder = s.web_search.curated_dir
    if folder is None:  # the settings validator already refuses this; kept for settings built by hand
        raise ConfigError("web_search.curated_dir: required when web_search.provider is curated")
    folder = folder.expanduser()
    if not folder.is_dir():
        raise ConfigError(f"web_search.curated_dir: {folder} does not exist or is not a folder")
    return CuratedWebSearch(folder, max_results=s.web_search.max_results)


def _no_web(s: RagSettings, data_dir: Path) -> None:
    return None


EMBEDDINGS: dict[str, Callable[[RagSettings, Path], BaseEmbedding]] = {
    "local": _local_embedding,
    "openai": _openai_embedding,
}
LLMS: dict[str, Callable[[LLMRoleSettings, RagSettings, Path], LLM]] = {
    "local": _local_llm,
    "openai": _openai_llm,
}
# Rerankers get the grader lazily: only the llm reranker builds (loads) it.
RERANKERS: dict[str, Callable[[RagSettings, Path, Callable[[], LLM]], Any]] = {
    "none": _no_reranker,
    "cohere": _cohere_reranker,
    "llm": _llm_reranker,
}
WEB_SEARCH: dict[str, Callable[[RagSettings, Path], WebSearch | None]] = {
    "disabled": _no_web,
    "tavily": _tavily_search,
    "curated": _curated_search,
}


class Providers:
    """Lazily built, cached provider objects for one configuration.

    Objects passed to the constructor (e.g. test fakes) win over the registry. Each
    object, built or passed, gets a trace map that does not grow with every call
    (:mod:`enterprise_rag.providers.callbacks`): they live as long as the RAG does.
    """

    def __init__(
        self,
        settings: RagSettings,
        data_dir: Path,
        *,
        embed_model: BaseEmbedding | None = None,
        generator: LLM | None = None,
        grader: LLM | None = None,
    ) -> None:
        self.settings = settings
        self.data_dir = data_dir
        injected = {"embed_model": embed_model, "generator": generator, "grader": grader}
        self._cache: dict[str, Any] = {name: scope_trace_map(obj) for name, obj in injected.items()}
        self._lock = threading.RLock()

    def _get(self, name: str, build: Callable[[], Any]) -> Any:
        with self._lock:
            if self._cache.get(name) is None:
                self._cache[name] = scope_trace_map(build())
            return self._cache[name]

    @property
    def embed_model(self) -> BaseEmbedding:
        s = self.settings
        return self._get("embed_model", lambda: EMBEDDINGS[s.embedding.provider](s, self.data_dir))  # type: ignore[no-any-return]

    @property
    def generator(self) -> LLM:
        s = self.settings
        return self._get(  # type: ignore[no-any-return]
            "generator", lambda: LLMS[s.llm.generator.provider](s.llm.generator, s, self.data_dir)
        )

    @property
    def grader(self) -> LLM:
        s = self.settings
        return self._get(  # type: ignore[no-any-return]
            "grader", lambda: LLMS[s.llm.grader.provider](s.llm.grader, s, self.data_dir)
        )

    @property
    def reranker(self) -> Any:
        s = self.settings
        return self._get("reranker", lambda: RERANKERS[s.reranker.provider](s, self.data_dir, lambda: self.grader))

    @property
    def web_search(self) -> WebSearch | None:
        """The web fallback source, or None when ``web_search.provider`` is disabled."""
        s = self.settings
        return self._get(  # type: ignore[no-any-return]
            "web_search", lambda: WEB_SEARCH[s.web_search.provider](s, self.data_dir)
        )

    @property
    def egress_policy(self) -> EgressPolicy:
        """Who may use :attr:`web_search` (builds the source on first use)."""
        s = self.settings
        return self._get(  # type: ignore[no-any-return]
            "egress_policy", lambda: EgressPolicy(self.web_search, s.web_search.egress_groups)
        )

    def describe(self) -> dict[str, str]:
        """Configured model ids per role, without building anything."""
        s = self.settings
        return {
            "embedding": f"{s.embedding.provider}:{s.embedding.model} ({s.embedding.dimensions}-d)",
            "generator": f"{s.llm.generator.provider}:{s.llm.generator.model}",
            "grader": f"{s.llm.grader.provider}:{s.llm.grader.model}",
            "reranker": {"none": "none", "llm": f"llm:grader ({s.llm.grader.model})"}.get(
                s.reranker.provider, f"{s.reranker.provider}:{s.reranker.model}"
            ),
            "web_search": f"curated:{s.web_search.curated_dir}"
            if s.web_search.provider == "curated"
            else s.web_search.provider,
        }
