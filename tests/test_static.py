"""The code stays lint-clean, type-checks and keeps its layers (ruff, mypy and import-linter from the dev extra)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    result = _run("ruff", "check", "enterprise_rag", "tests", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = _run("mypy", "enterprise_rag")
    assert result.returncode == 0, result.stdout + result.stderr


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter on the package found first from ``root`` (with the contracts of ``root/pyproject.toml``)."""
    lint_imports = Path(sys.executable).parent / "lint-imports"
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(lint_imports), "--no-logo", "--no-cache"], cwd=root, capture_output=True, text=True,
                          timeout=600, env=env)  # fmt: skip


def test_import_contracts_hold() -> None:
    """The layer contracts in pyproject.toml: imports go cli -> rag -> answer -> retrieval -> llm -> store -> schema,
    the answer and store packages have layers of their own, and no package's siblings import each other in a cycle."""
    result = _lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "imports"),
    [("retrieval/windows.py", "enterprise_rag.retrieval.retriever"), ("llm/untrusted.py", "enterprise_rag.llm.caller"),
     ("store/scoping.py", "enterprise_rag.store.search")],
)  # fmt: skip
def test_a_cycle_inside_a_subpackage_breaks_the_contracts(tmp_path: Path, module: str, imports: str) -> None:
    shutil.copytree(REPO / "enterprise_rag", tmp_path / "enterprise_rag", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / "enterprise_rag" / module).open("a", encoding="utf-8") as f:
        f.write(f"\nimport {imports}  # noqa: E402\n")
    result = _lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout + result.stderr
    package = "enterprise_rag." + module.split("/")[0]
    assert "No dependency cycle between the siblings of any package BROKEN" in result.stdout, result.stdout
    assert f"No cycles are allowed in {package}." in result.stdout, result.stdout
