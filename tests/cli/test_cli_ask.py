"""The ask / trace / demo command helpers, and `enterprise-rag trace` on a real stored trace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.cli import app
from enterprise_rag.cli import ask as cli_ask
from enterprise_rag.cli.ask import SAMPLE_CORPUS, demo_questions, show_result
from enterprise_rag.cli.common import out
from enterprise_rag.config import load_settings
from enterprise_rag.testing import ScriptedLLM, written_for_readers
from tests.support.workflow import answer_with, grade_yes_if, supported_if_stated

DOC = "---\ntitle: Leave\nallowed_groups: [staff]\n---\n# Leave\n\nStaff get 27 days of annual leave.\n"


def _scripted_rag(fresh_dsn: str, tmp_path: Path, embed_model: Any, name: str = "leave.md") -> EnterpriseRAG:
    """DOC, as ``name`` in a corpus folder, ingested into a store whose scripted models answer "27 days" from it."""
    corpus = tmp_path / "corpus"
    (corpus / name).parent.mkdir(parents=True)
    (corpus / name).write_text(DOC)
    rag = EnterpriseRAG(
        data_dir=tmp_path / "data", settings=load_settings(None, database={"dsn": fresh_dsn}), embed_model=embed_model,
        generator=ScriptedLLM({"generate": answer_with("27 days")}),
        grader=ScriptedLLM({"grade": grade_yes_if("27 days"), "support": supported_if_stated,
                            "addressee": written_for_readers}),
    )  # fmt: skip
    rag.ingest([corpus])
    return rag


def _scripted_query(fresh_dsn: str, tmp_path: Path, embed_model: Any) -> tuple[str, Any]:
    rag = _scripted_rag(fresh_dsn, tmp_path, embed_model)
    res = rag.query("How many days of annual leave do staff get?", user=Principal("ann", ["staff"]))
    rag.close()
    return res.trace_id, res


def _cli(*args: str, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "enterprise_rag.cli", *args, "--config", str(config)],
        capture_output=True, text=True, timeout=300, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_trace_command_shows_own_trace_only(fresh_dsn: str, tmp_path: Path, embed_model: Any) -> None:
    trace_id, res = _scripted_query(fresh_dsn, tmp_path, embed_model)
    assert "27 days" in res.answer and res.citations[0].source.endswith("leave.md")
    config = tmp_path / "cfg.yaml"
    config.write_text(yaml.safe_dump({"database": {"dsn": fresh_dsn}}))
    shown = _cli("trace", trace_id, "--user", "ann", config=config)
    assert shown.returncode == 0, shown.stderr
    for step in ("prepare", "retrieve", "grade", "generate", "verify", "finish"):
        assert step in shown.stdout
    as_json = _cli("trace", trace_id, "--user", "ann", "--json", config=config)
    assert json.loads(as_json.stdout)["status"] == "done"
    other = _cli("trace", trace_id, "--user", "mallory", config=config)
    assert other.returncode == 1 and "no trace" in other.stderr


def test_show_result_prints_answer_citations_and_decision(
    fresh_dsn: str, tmp_path: Path, embed_model: Any, monkeypatch: Any
) -> None:
    _, res = _scripted_query(fresh_dsn, tmp_path, embed_model)
    monkeypatch.setenv("COLUMNS", "300")  # read per call; setting out.width would outlive the test
    with out.capture() as captured:
        show_result(res)
    text = captured.get()
    assert "27 days" in text and "leave.md" in text and "decision proceed" in text and res.trace_id in text


def test_demo_questions_include_out_of_corpus_and_permission_contrast() -> None:
    manifest = yaml.safe_load((SAMPLE_CORPUS / "manifest.yaml").read_text())
    picked = demo_questions(manifest["questions"], 4)
    assert len(picked) == 4
    assert any(not q.get("expected_sources") and "not_visible_to" not in q and q in manifest["questions"]
               for q in picked)  # fmt: skip
    contrast = [q for q in picked if q not in manifest["questions"]]
    assert contrast, "a question re-asked by a user who may not see its document"


def test_chat_mode_follow_ups_use_the_history(
    fresh_dsn: str, tmp_path: Path, embed_model: Any, monkeypatch: Any
) -> None:
    """``ask`` without a question: each answer joins the history the next question is rewritten with."""
    (tmp_path / "leave.md").write_text(DOC)
    seen: list[str] = []

    def standalone(messages: list[Any], kwargs: dict[str, Any]) -> str:
        seen.append(messages[-1].content)
        return "How many days of annual leave do staff get?"

    rag = EnterpriseRAG(
        data_dir=tmp_path / "data", settings=load_settings(None, database={"dsn": fresh_dsn}), embed_model=embed_model,
        generator=ScriptedLLM({"generate": answer_with("27 days")}),
        grader=ScriptedLLM({"grade": grade_yes_if("27 days"), "support": supported_if_stated,
                            "addressee": written_for_readers,
                            "standalone": standalone}),
    )  # fmt: skip
    rag.ingest([tmp_path / "leave.md"])
    monkeypatch.setattr(cli_ask, "open_rag", lambda config, data_dir: rag)

    first = "How much annual leave do staff get?"
    result = CliRunner().invoke(
        app, ["ask", "--user", "ann", "--groups", "staff", "--json"], input=f"{first}\nAnd in days?\n\n"
    )

    assert result.exit_code == 0, result.output
    answers = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(answers) == 2 and all("27 days" in a["answer"] for a in answers)
    assert len(seen) == 1  # only the follow-up is rewritten, with the first turn in its prompt
    assert first in seen[0] and answers[0]["answer"] in seen[0] and "And in days?" in seen[0]
    trace = rag.trace(answers[1]["trace_id"], Principal("ann", ["staff"]))
    assert trace is not None
    assert trace["history"] == [
        {"role": "user", "content": first}, {"role": "assistant", "content": answers[0]["answer"]},
    ]  # fmt: skip


def test_ask_shows_each_step_with_its_seconds_and_the_draft_before_the_checked_answer(
    fresh_dsn: str, tmp_path: Path, embed_model: Any, monkeypatch: Any
) -> None:
    rag = _scripted_rag(fresh_dsn, tmp_path, embed_model)
    monkeypatch.setattr(cli_ask, "open_rag", lambda config, data_dir: rag)

    result = CliRunner().invoke(app, ["ask", "How many days of annual leave do staff get?", "--user", "ann",
                                      "--groups", "staff"])  # fmt: skip

    assert result.exit_code == 0, result.output
    progress = result.stderr.splitlines()
    for step in ("retrieve", "grade", "generate", "verify"):
        assert f"  {step} ..." in progress
        assert any(line.startswith(f"  {step} ") and line.endswith(" s") for line in progress)
    draft = next(line for line in progress if line.startswith("  draft, not yet checked: "))
    assert "27 days" in draft and progress.index(draft) < progress.index("  verify ...")
    assert "27 days" in result.stdout and "draft" not in result.stdout  # stdout: the checked answer only


def test_ask_shows_the_source_relative_to_its_folder_and_wraps_it_whole(
    fresh_dsn: str, tmp_path: Path, embed_model: Any, monkeypatch: Any
) -> None:
    name = "policies/human-resources/annual-leave/leave.md"
    rag = _scripted_rag(fresh_dsn, tmp_path, embed_model, name)
    monkeypatch.setattr(cli_ask, "open_rag", lambda config, data_dir: rag)
    result = CliRunner().invoke(app, ["ask", "How many days of annual leave do staff get?", "--user", "ann",
                                      "--groups", "staff"], terminal_width=60)  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["source", "page"])
    start, end = lines[header].index("source"), lines[header].index("page")
    rows = lines[header + 1 : next(i for i, line in enumerate(lines) if line.startswith("decision"))]
    assert "".join(line[start:end].strip() for line in rows) == name
    assert str(tmp_path) not in result.stdout
