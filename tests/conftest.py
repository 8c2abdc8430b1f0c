"""Shared fixtures: one real embedded PostgreSQL per test session, a fresh database per test."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from enterprise_rag import EnterpriseRAG
from enterprise_rag.config import load_settings
from enterprise_rag.providers.local_embedding import LocalMiniLMEmbedding
from enterprise_rag.providers.model_files import install_model
from enterprise_rag.store.embedded import start_embedded, stop_embedded
from tests.support.databases import create_db, drop_db

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
SCENARIOS = SHARED / "scenarios"
SCIFACT = SHARED / "data" / "scifact"

_counter = itertools.count()


@pytest.fixture(scope="session")
def server_dir() -> Iterator[Path]:
    """A data dir (outside /root) holding the session's embedded server."""
    with tempfile.TemporaryDirectory(prefix="erag-test-", dir="/tmp") as tmp:
        yield Path(tmp)


@pytest.fixture(scope="session")
def server_dsn(server_dir: Path) -> Iterator[str]:
    dsn = start_embedded(server_dir)
    yield dsn
    stop_embedded(server_dir)


@pytest.fixture
def fresh_dsn(server_dsn: str) -> Iterator[str]:
    """DSN of a new, empty database on the session's server."""
    name = f"t_{next(_counter)}_{os_pid()}"
    yield create_db(server_dsn, name)
    drop_db(server_dsn, name)


def os_pid() -> int:
    import os

    return os.getpid()


@pytest.fixture(scope="session")
def embed_model():  # type: ignore[no-untyped-def]
    """The real local embedding model, loaded once per session."""
    return LocalMiniLMEmbedding()


@pytest.fixture(scope="session")
def model_data_dir(server_dir: Path) -> Path:
    """A data dir holding the assembled local GGUF model (assembled once per session, ~3 s)."""
    data_dir = server_dir / "models-data"
    install_model(data_dir)
    return data_dir


@pytest.fixture
def rag(fresh_dsn: str, tmp_path: Path, embed_model) -> Iterator[EnterpriseRAG]:  # type: ignore[no-untyped-def]
    """An EnterpriseRAG on a fresh database with the real local embedding model."""
    settings = load_settings(None, database={"dsn": fresh_dsn})
    instance = EnterpriseRAG(data_dir=tmp_path / "data", settings=settings, embed_model=embed_model)
    yield instance
    instance.close()
