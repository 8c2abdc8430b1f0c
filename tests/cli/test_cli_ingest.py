"""The ``enterprise-rag`` console script for ingestion, run as a real subprocess on a real database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
import yaml
from typer.main import get_command
from typer.testing import CliRunner

from enterprise_rag.cli import app
from enterprise_rag.cli.common import EXIT_CODES
from tests.conftest import REPO

SCRIPT = REPO / ".venv" / "bin" / "enterprise-rag"

Run = Callable[..., subprocess.CompletedProcess[str]]


def _env(columns: int | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ENTERPRISE_RAG_")}
    env.pop("COLUMNS", None)
    if columns:
        env["COLUMNS"] = str(columns)
    return env


def _command() -> list[str]:
    return [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "enterprise_rag.cli"]


@pytest.fixture
def config(fresh_dsn: str, tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"database": {"dsn": fresh_dsn}}))
    return path


@pytest.fixture
def cli(config: Path, tmp_path: Path) -> Run:
    """Run the CLI with the test config and data dir; wide columns so table rows are not wrapped."""

    def run(*args: str, columns: int | None = 400, config_path: Path = config) -> subprocess.CompletedProcess[str]:
        cmd = [*_command(), *args, "--config", str(config_path), "--data-dir", str(tmp_path / "data")]
        return subprocess.run(
            cmd, capture_output=True, text=True, env=_env(columns), cwd=tmp_path, timeout=180, check=False
        )

    return run


def _md(title: str, body: str, **front: object) -> str:
    fm = yaml.safe_dump({"title": title, **front}, sort_keys=False).strip()
    return f"---\n{fm}\n---\n\n## Section\n\n{body}\n"


def _documents(dsn: str) -> dict[str, tuple[list[str], list[str]]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('rag_documents')").fetchone() == (None,):
            return {}  # nothing was ever written: the store was not even migrated
        rows = conn.execute("SELECT source, allowed_groups, allowed_users FROM rag_documents").fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def test_ingest_folder_with_groups_prints_a_summary(cli: Run, fresh_dsn: str, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text(_md("Alpha", "The alpha office opens at nine."))
    (folder / "b.txt").write_text("Beta notes\n\nThe beta office opens at ten.\n")

    result = cli("ingest", str(folder), "--groups", "a, b")
    assert result.returncode == 0, result.stderr
    assert "2 added, 0 updated, 0 unchanged, 0 failed" in result.stdout
    assert "a.md" in result.stdout and "b.txt" in result.stdout
    assert "Traceback" not in result.stderr
    stored = _documents(fresh_dsn)
    assert stored == {str((folder / n).resolve()): (["a", "b"], []) for n in ("a.md", "b.txt")}

    again = cli("ingest", str(folder), "--groups", "a,b", "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert sorted(report["unchanged"]) == sorted(stored) and report["nodes_written"] == 0


def test_ingest_with_a_bad_file_exits_1_naming_file_and_reason(cli: Run, fresh_dsn: str, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.md").write_text(_md("Good", "The good office opens at nine."))
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 4)

    result = cli("ingest", str(folder), "--groups", "staff")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "1 added, 0 updated, 0 unchanged, 1 failed" in result.stdout
    broken = str((folder / "broken.pdf").resolve())
    failed_line = next(line for line in result.stdout.splitlines() if broken in line)
    assert "failed" in failed_line and "corrupt or unreadable PDF" in failed_line
    assert "Traceback" not in result.stderr
    assert list(_documents(fresh_dsn)) == [str((folder / "good.md").resolve())]

    as_json = cli("ingest", str(folder), "--groups", "staff", "--json")
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert [f["path"] for f in report["failed"]] == [broken]
    assert "corrupt" in report["failed"][0]["reason"]


def test_ingest_without_acl_exits_1_with_the_acl_reason(cli: Run, fresh_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "no-acl.md"
    path.write_text(_md("Open", "Nobody said who may read this."))
    result = cli("ingest", str(path))
    assert result.returncode == 1, (result.stdout, result.stderr)
    line = next(line for line in result.stdout.splitlines() if str(path.resolve()) in line)
    assert "no ACL" in line and "--groups" in line
    assert _documents(fresh_dsn) == {}

    with_users = cli("ingest", str(path), "--users", "dana")
    assert with_users.returncode == 0, with_users.stdout
    assert _documents(fresh_dsn) == {str(path.resolve()): ([], ["dana"])}


def test_delete_then_delete_again(cli: Run, fresh_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "memo.md"
    path.write_text(_md("Memo", "The memo is short.", allowed_groups=["staff"]))
    assert cli("ingest", str(path)).returncode == 0

    first = cli("delete", str(path))
    assert first.returncode == 0, first.stderr
    assert f"deleted {path}" in first.stdout
    assert _documents(fresh_dsn) == {}
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM rag_nodes").fetchone() == (0,)

    second = cli("delete", str(path), columns=None)
    assert second.returncode == 1
    assert second.stderr.strip() == f"not found: {path}"


def test_status_json_reports_versions_and_counts(cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "memo.md"
    path.write_text(_md("Memo", "The memo is short.", allowed_groups=["staff"]))
    assert cli("ingest", str(path)).returncode == 0

    result = cli("status", "--json", columns=None)  # default 80 columns must not break the JSON
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["postgres_version"].startswith("PostgreSQL ")
    assert info["pgvector_version"]
    assert info["documents"] == 1
    assert info["nodes"] >= info["leaf_nodes"] >= 1
    assert info["embedded"] is False


def test_invalid_config_exits_2_with_one_line_naming_the_field(cli: Run, fresh_dsn: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"database": {"dsn": fresh_dsn}, "ingest": {"max_file_mb": -1}}))
    result = cli("ingest", str(tmp_path), "--groups", "staff", columns=None, config_path=bad)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # not wrapped at the default 80 columns either
    assert lines[0].startswith("error: ") and "ingest.max_file_mb" in lines[0] and str(bad) in lines[0]
    assert result.stdout == ""


# ---- output conventions: --json, progress only on a terminal, colour only on a terminal without NO_COLOR ----
def _run_on_pty(
    args: list[str], stream: str, tmp_path: Path, extra_env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run the CLI with ``stream`` (stdout or stderr) attached to a pseudo-terminal; returns (code, pty, other)."""
    import pty

    master, slave = pty.openpty()
    env = {k: v for k, v in _env(120).items() if k != "NO_COLOR"}
    env.update(extra_env or {})
    proc = subprocess.Popen(
        [*_command(), *args], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
        stdout=slave if stream == "stdout" else subprocess.PIPE,
        stderr=slave if stream == "stderr" else subprocess.PIPE,
    )  # fmt: skip
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    piped_out, piped_err = proc.communicate(timeout=180)
    other = piped_err if stream == "stdout" else piped_out
    return proc.returncode, b"".join(chunks).decode(errors="replace"), other.decode(errors="replace")


def _memo_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir(exist_ok=True)
    (folder / "memo.md").write_text(_md("Memo", "The memo is short.", allowed_groups=["staff"]))
    return folder


def test_progress_bar_only_when_stderr_is_a_terminal(cli: Run, config: Path, tmp_path: Path) -> None:
    folder = _memo_folder(tmp_path)
    piped = cli("ingest", str(folder))
    assert piped.returncode == 0 and piped.stderr == ""  # nothing but errors on a pipe

    (folder / "memo.md").write_text(_md("Memo", "The memo is now longer.", allowed_groups=["staff"]))
    args = ["ingest", str(folder), "--config", str(config), "--data-dir", str(tmp_path / "data")]
    code, on_tty, stdout = _run_on_pty(args, "stderr", tmp_path)
    assert code == 0, on_tty
    assert "ingesting" in on_tty or "updated: memo.md" in on_tty  # the bar was drawn on the terminal
    assert "1 updated" in stdout and "\x1b[" not in stdout  # stdout is a pipe: plain text


def test_colour_only_on_a_terminal_and_never_with_no_color(config: Path, tmp_path: Path) -> None:
    folder = _memo_folder(tmp_path)
    args = ["ingest", str(folder), "--config", str(config), "--data-dir", str(tmp_path / "data")]
    code, coloured, _ = _run_on_pty(args, "stdout", tmp_path)
    assert code == 0, coloured
    assert "\x1b[" in coloured and "memo.md" in coloured
    code, plain, _ = _run_on_pty(args, "stdout", tmp_path, {"NO_COLOR": "1"})
    assert code == 0, plain
    assert "\x1b[" not in plain and "memo.md" in plain


def test_delete_json_lists_deleted_and_missing(cli: Run, fresh_dsn: str, tmp_path: Path) -> None:
    path = _memo_folder(tmp_path) / "memo.md"
    assert cli("ingest", str(path)).returncode == 0
    result = cli("delete", str(path), "no-such-doc", "--json", columns=None)
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout) == {"deleted": [str(path)], "not_found": ["no-such-doc"]}
    assert _documents(fresh_dsn) == {}


def test_every_command_documents_exit_codes_and_has_json_where_output_matters() -> None:
    root = get_command(app)
    commands = root.commands  # type: ignore[attr-defined]
    for name in ("status", "ingest", "delete", "search", "eval", "ask", "trace"):
        flags = {opt for p in commands[name].params for opt in getattr(p, "opts", [])}
        assert "--json" in flags, name
    runner = CliRunner()
    for args in [[], *([name] for name in commands if name != "models"), ["models", "install"]]:
        shown = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "300", "NO_COLOR": "1"})
        assert shown.exit_code == 0, (args, shown.output)
        text = " ".join(shown.output.split())
        for code, meaning in EXIT_CODES.items():
            assert f"{code} {meaning}" in text, (args, code)
