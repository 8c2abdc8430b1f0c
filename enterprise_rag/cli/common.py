"""What every CLI command module shares: consoles, common options, progress bars, small parsers.

Output is plain-text safe: colour and styles only when the stream is a terminal
and ``NO_COLOR`` is unset; progress bars go to stderr and only to a terminal,
so piped output and ``--json`` stay clean.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from enterprise_rag import EnterpriseRAG

EXIT_CODES = {
    0: "success",
    1: "finished, but something failed (a file not ingested, a document or trace not found)",
    2: "bad input or configuration (one-line error on stderr)",
    3: "store or model unavailable (database unreachable, model file missing or corrupt)",
}
EXIT_CODES_HELP = "Exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items()) + "."


def wants_colour(stream: TextIO) -> bool:
    """Colour only for a terminal, and never when ``NO_COLOR`` is set (https://no-color.org)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR")


def make_console(stderr: bool = False) -> Console:
    """A console that writes escape codes only when :func:`wants_colour` allows it."""
    colour = wants_colour(sys.stderr if stderr else sys.stdout)
    return Console(stderr=stderr, color_system="auto" if colour else None, highlight=colour)


out = make_console()
err = make_console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML config file (default: built-ins).")]
DataDirOpt = Annotated[Path | None, typer.Option("--data-dir", help="Data dir for the embedded store and models.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
UserOpt = Annotated[str, typer.Option("--user", "-u", help="Asking user id.")]
GroupsOpt = Annotated[str | None, typer.Option("--groups", "-g", help="Comma-separated groups of the user.")]


def split_csv(value: str | None) -> list[str] | None:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; None or empty -> None."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def open_rag(config: Path | None, data_dir: Path | None) -> EnterpriseRAG:
    """The store of one command; an embedded server the command had to start is stopped when it ends
    (unless another process has connected to it meanwhile)."""
    return EnterpriseRAG.from_config(config, data_dir=data_dir, stop_server_on_close=True)


def progress_bar() -> Progress:
    """A transient progress bar on stderr, shown only when stderr is a terminal."""
    return Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, transient=True, disable=not err.is_terminal,
    )  # fmt: skip


def document_progress(bar: Progress, label: str) -> Callable[[str, str], None]:
    """An ingest progress callback: each document advances a new task of ``bar`` and shows its outcome."""
    task = bar.add_task(label, total=None)
    return lambda source, outcome: bar.update(task, advance=1, description=f"{outcome}: {Path(source).name}")


def print_json(data: Any) -> None:
    out.print_json(json.dumps(data, default=str))
