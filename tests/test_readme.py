"""The README is real: its Python example runs, its CLI quick start runs, every command and flag it names exists.

The example runs as written against a fresh database on the real embedded
PostgreSQL with the real parsers and embedding model; only the two LLM roles
are injected :class:`ScriptedLLM` fakes (the real local LLM would take minutes).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

import enterprise_rag
from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.cli import app
from enterprise_rag.cli import ask as cli_ask
from enterprise_rag.cli import commands as cli
from enterprise_rag.cli.common import EXIT_CODES
from enterprise_rag.config import load_settings
from enterprise_rag.schema.result import QueryResult
from enterprise_rag.testing import ScriptedLLM, written_for_readers
from tests.support.workflow import answer_with, grade_yes_if, supported_if_stated

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)

FILES = {
    "handbook/leave.md": "# Annual leave\n\nStaff get 27 days of annual leave per year.\n\n"
    "Part-time staff get annual leave pro rata to their hours.\n",
    "handbook/expenses.md": "# Travel expenses\n\nMeals on business trips are reimbursed up to 60 euros per day.\n",
    "hr/salaries.md": "---\ntitle: Salary bands\nallowed_groups: [hr]\n---\n# Salary bands\n\n"
    "The salary band for a senior engineer tops out at 98,000 euros.\n",
}


def section(title: str) -> str:
    """The README text under ``## title`` up to the next ``## `` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def blocks(text: str, lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(text) if kind == lang]


def cli_lines(text: str) -> list[str]:
    """Every ``enterprise-rag ...`` command in code blocks and inline code, comments dropped."""
    lines = [ln for kind, body in FENCE.findall(text) if kind == "bash" for ln in body.splitlines()]
    lines += re.findall(r"`(enterprise-rag [^`]+)`", text)
    out = []
    for line in lines:
        line = line.strip()
        if line.startswith("enterprise-rag "):
            out.append(re.split(r"\s+#\s", line)[0].strip())
    return out


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def injected(fresh_dsn: str, embed_model: Any) -> Callable[..., EnterpriseRAG]:
    """Builds EnterpriseRAGs on the test database with scripted LLMs; the README's own arguments are kept."""

    def build(data_dir: str | Path | None = None, **_: Any) -> EnterpriseRAG:
        return EnterpriseRAG(
            data_dir=data_dir,
            settings=load_settings(None, database={"dsn": fresh_dsn}, workflow={"llm_backoff_s": 0.01}),
            embed_model=embed_model,
            generator=ScriptedLLM({"generate": answer_with("annual leave"), "revise": answer_with("annual leave")}),
            grader=ScriptedLLM({
                "grade": grade_yes_if("annual leave"), "support": supported_if_stated,
                "rewrite": "annual leave days per year", "addressee": written_for_readers,
                "standalone": "How much annual leave do part-time staff get?",
            }),
        )  # fmt: skip

    return build


def test_readme_starts_with_the_two_commands() -> None:
    assert README.startswith("# enterprise_rag\n\n```bash\nbash scripts/demo.sh\nbash scripts/test.sh\n```\n")


def test_readme_has_the_sections_users_need() -> None:
    for title in ("Install", "Quick start with your own documents", "Library use", "Notebooks",
                  "Command line reference", "Permissions model", "Configuration", "Production deployment",
                  "Troubleshooting"):  # fmt: skip
        assert section(title).strip()
    for notebook in ("01_quickstart", "02_permissions", "03_retrieval_quality", "04_inside_a_query"):
        assert f"notebooks/{notebook}.ipynb" in section("Notebooks")
    assert "docs/configuration.md" in section("Configuration") and (REPO / "docs" / "configuration.md").exists()
    assert "ENTERPRISE_RAG_" in section("Configuration") and "__" in section("Configuration")
    for code, meaning in EXIT_CODES.items():
        assert f"| {code} | {meaning} |" in section("Command line reference")


def test_the_python_example_runs_as_written(
    workdir: Path, injected: Callable[..., EnterpriseRAG], monkeypatch: pytest.MonkeyPatch
) -> None:
    (example,) = blocks(section("Library use"), "python")
    monkeypatch.setattr(enterprise_rag, "EnterpriseRAG", injected)  # `from enterprise_rag import ...` gets it

    namespace: dict[str, Any] = {}
    exec(compile(example, "README.md", "exec"), namespace)  # noqa: S102

    res, follow_up, streamed = namespace["res"], namespace["follow_up"], namespace["streamed"]
    assert isinstance(res, QueryResult) and "27 days" in res.answer and res.citations
    assert res.citations[0].source.endswith("handbook/leave.md")
    assert isinstance(streamed, QueryResult) and streamed.answer == res.answer
    assert follow_up.citations and namespace["trace"]["history"] == []
    assert namespace["response"].source_nodes and namespace["nodes"]
    assert json.dumps(namespace["payload"]) and namespace["report"].summary().startswith("2 added")
    rag = namespace["rag"]
    hana = Principal("hana", ["all-staff", "hr"])
    assert not any("salaries" in n.node.metadata["source"] for n in rag.retrieve("salary bands", user=hana))


def test_the_cli_quick_start_runs(
    workdir: Path, injected: Callable[..., EnterpriseRAG], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "open_rag", lambda config, data_dir: injected(data_dir))
    monkeypatch.setattr(cli_ask, "open_rag", lambda config, data_dir: injected(data_dir))
    commands = cli_lines(section("Quick start with your own documents"))
    assert [c.split()[1] for c in commands] == ["ingest", "ingest", "ask", "ask", "search"]
    runner = CliRunner()
    outputs = []
    for command in commands:
        result = runner.invoke(app, shlex.split(command)[1:], input="\n", env={"COLUMNS": "200"})
        assert result.exit_code == 0, (command, result.output)
        outputs.append(result.stdout)
    assert "2 added" in outputs[0] and "1 added" in outputs[1]
    assert "27 days" in outputs[2] and "leave.md" in outputs[2]
    passages = json.loads(outputs[4])
    assert passages and not any("salaries" in p["source"] for p in passages)  # dana may not read the hr document


def test_every_command_and_flag_in_the_readme_exists() -> None:
    root = get_command(app)  # a click Group (newer typer vendors its own click: compared by shape)
    checked = 0
    for line in cli_lines(README):
        words = line.split()
        command: Any = root
        for word in words[1:]:
            if word in getattr(command, "commands", {}):
                command = command.commands[word]
            else:
                break
        assert not hasattr(command, "commands"), f"README names an unknown command: {line}"
        known = {opt for p in command.params for opt in (*getattr(p, "opts", []), *getattr(p, "secondary_opts", []))}
        for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", line):
            assert flag in known, f"README uses {flag} which `{' '.join(words[:2])}` does not have: {line}"
            checked += 1
    assert checked > 40
