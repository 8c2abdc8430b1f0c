"""What every CLI command module shares: consoles, common options, small parsers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

if TYPE_CHECKING:
    from enterprise_rag.rag import EnterpriseRAG

out = Console()
err = Console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML config file (default: built-ins).")]
DataDirOpt = Annotated[Path | None, typer.Option("--data-dir", help="Data dir for the embedded store and models.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def split_csv(value: str | None) -> list[str] | None:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; None or empty -> None."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def open_rag(config: Path | None, data_dir: Path | None) -> EnterpriseRAG:
    from enterprise_rag import EnterpriseRAG

    return EnterpriseRAG.from_config(config, data_dir=data_dir)


def print_json(data: Any) -> None:
    out.print_json(json.dumps(data, default=str))
