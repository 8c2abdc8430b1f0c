"""The ``openai`` provider against a real OpenAI-compatible HTTP server on 127.0.0.1.

xllamacpp serves the packaged GGUF model over HTTP (the llama.cpp server that
enterprises run behind vLLM-, Ollama- or gateway-style endpoints); the package
talks to it through the real ``openai`` SDK under a model name llama-index's
OpenAI table does not know, and a whole query runs: logprob grading, answer,
support check, and the embeddings of ingest and retrieval. Slow: the real model answers.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.providers.model_files import model_path
from tests.conftest import SCENARIOS
from tests.support.http import clean_env, no_network  # noqa: F401  (autouse guards)
from tests.support.scenario_matching import contains

pytestmark = pytest.mark.slow
MODEL_NAME = "Qwen/Qwen2.5-Coder-1.5B-Instruct"  # not an OpenAI model: stock llama-index OpenAI refuses it
EMBEDDING_SIZE = 1536  # the model's hidden size
DANA = Principal("dana", ["all-staff"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server_url(model_data_dir: Path) -> Iterator[str]:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model_path(model_data_dir))
    params.n_ctx = 8192
    params.n_parallel = 1
    params.cache_prompt = True
    params.verbosity = -1
    params.warmup = False
    params.embedding = True  # the same server answers /v1/embeddings too (mean-pooled)
    params.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
    params.hostnames = ["127.0.0.1"]
    params.port = _free_port()
    server = xllamacpp.Server(params)
    yield f"{server.listening_address}/v1"
    del server


def test_a_query_through_an_openai_compatible_server(server_url: str, fresh_dsn: str, tmp_path: Path) -> None:
    """Embeddings, grading, answer and checks all go over HTTP to the server."""
    role = {"provider": "openai", "model": MODEL_NAME, "api_base": server_url, "api_key": "unused",
            "context_window": 8192, "timeout_s": 300}  # fmt: skip
    embedding = {"provider": "openai", "model": MODEL_NAME, "api_base": server_url, "api_key": "unused",
                 "dimensions": EMBEDDING_SIZE}  # fmt: skip
    settings = load_settings(
        None, database={"dsn": fresh_dsn}, embedding=embedding,
        llm={"generator": role, "grader": {**role, "max_tokens": 384}},
    )  # fmt: skip
    rag = EnterpriseRAG(data_dir=tmp_path / "data", settings=settings)
    try:
        assert not rag.ingest([SCENARIOS / "docs/compliance/kyc.md"], allowed_groups=["all-staff"]).failed
        res = rag.query("What does a new account holder have to submit for KYC, and how long do they have?", DANA)

        assert contains(res.answer, ["30 days", "30-day", "thirty days"]), res.answer
        assert any(c.source.endswith("kyc.md") for c in res.citations), res.citations
        trace = rag.trace(res.trace_id, DANA)
        assert trace is not None
        calls = trace["llm_calls"]
        assert calls and {c["model"] for c in calls} == {MODEL_NAME}
        assert {"grade", "generate"} <= {c["name"] for c in calls}
        assert all(c["prompt_tokens"] > 0 for c in calls)  # usage read from the server's HTTP replies
        assert res.evaluation["support"]["label"] != "unknown"
        assert rag.status()["nodes"] > 0 and rag.providers.embed_model.model_name == MODEL_NAME
    finally:
        rag.close()
