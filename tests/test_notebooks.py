"""The notebooks in notebooks/ run top to bottom without error, and are committed with their outputs.

Each executes in a fresh kernel of this interpreter (nbclient, the ``python3``
kernel spec that ipykernel installs in the venv) from the notebooks folder, on
its own temporary embedded store; the committed files are read, never rewritten.
Slow: together they ingest small corpora and ask the local LLM five questions.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(p.stem for p in NOTEBOOK_DIR.glob("*.ipynb"))
EXPECTED = ["01_quickstart", "02_permissions", "03_retrieval_quality", "04_inside_a_query"]
WITH_PLOTS = {"03_retrieval_quality", "04_inside_a_query"}
CELL_TIMEOUT_S = 900


def _notebook(stem: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)


def _outputs(nb: nbformat.NotebookNode) -> list[dict]:  # type: ignore[type-arg]
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])]


def test_all_four_notebooks_are_there() -> None:
    assert NOTEBOOKS == EXPECTED


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_committed_notebook_holds_its_outputs(stem: str) -> None:
    nb = _notebook(stem)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.get("execution_count") for cell in code), "every code cell was executed"
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("text/html" in o.get("data", {}) for o in outputs), "a result shows as a table"
    if stem in WITH_PLOTS:
        assert any("image/png" in o.get("data", {}) for o in outputs), "a matplotlib plot is saved"


@pytest.mark.slow
@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_notebook_runs_top_to_bottom(stem: str) -> None:
    from nbclient import NotebookClient

    nb = _notebook(stem)
    client = NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK_DIR)}}
    )
    client.execute()  # raises CellExecutionError, with the failing cell and traceback, on any error
    assert not [o for o in _outputs(nb) if o.get("output_type") == "error"]
