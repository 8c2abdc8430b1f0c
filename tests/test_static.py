"""The code stays lint-clean, type-checks and keeps its layers (ruff, mypy and import-linter from the dev extra)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    result = _run("ruff", "check", "enterprise_rag", "tests", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = _run("mypy", "enterprise_rag")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_contracts_hold() -> None:
    """The layer contracts in pyproject.toml: imports go cli -> rag -> answer -> retrieval -> llm -> store -> schema."""
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), "--no-logo", "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
