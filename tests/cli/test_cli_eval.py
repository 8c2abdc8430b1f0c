"""`enterprise-rag eval` end to end: a real store, the real local embedding model, the CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from enterprise_rag import EnterpriseRAG
from enterprise_rag.config import load_settings
from enterprise_rag.evaluation.corpus_eval import LabelMatcher, parse_scopes
from tests.conftest import REPO

SAMPLE = REPO / "enterprise_rag" / "sample_corpus"
QUESTIONS = SAMPLE / "questions.yaml"


def run_cli(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "enterprise_rag.cli", *map(str, args)],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout, check=False,
    )  # fmt: skip


def write_config(tmp_path: Path, dsn: str) -> list[str]:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"database": {"dsn": dsn}}))
    return ["--config", str(config), "--data-dir", str(tmp_path / "data")]


@pytest.fixture
def sample_store(fresh_dsn: str, tmp_path: Path, embed_model) -> list[str]:  # type: ignore[no-untyped-def]
    """The sample corpus ingested (ACLs as in manifest.yaml) into a fresh database; returns CLI store options."""
    manifest = yaml.safe_load((SAMPLE / "manifest.yaml").read_text())
    settings = load_settings(None, database={"dsn": fresh_dsn})
    with EnterpriseRAG(data_dir=tmp_path / "data", settings=settings, embed_model=embed_model) as rag:
        for doc in manifest["documents"]:
            report = rag.ingest([SAMPLE / doc["path"]], allowed_groups=doc["allowed_groups"])
            assert not report.failed, report.failed
    return write_config(tmp_path, fresh_dsn)


def test_questions_file_covers_the_corpus() -> None:
    data = yaml.safe_load(QUESTIONS.read_text())
    manifest = yaml.safe_load((SAMPLE / "manifest.yaml").read_text())
    acl = {d["path"]: set(d["allowed_groups"]) for d in manifest["documents"]}
    ids = {q["id"] for q in data["questions"]}
    assert {q["id"] for q in manifest["questions"] if q["expected_sources"]} <= ids
    for q in data["questions"]:
        for path in q["relevant"]:
            assert path in acl, f"{q['id']}: {path} is not a sample document"
            assert set(q["user"]["groups"]) & acl[path], f"{q['id']}: its user cannot read {path}"
    asked_about = {p for q in data["questions"] for p in q["relevant"]}
    assert asked_about == set(acl) - {"policies/on-call-policy-2023.md"}, "every current document is asked about"


def test_label_matcher_uses_document_id_or_whole_path_suffix() -> None:
    match = LabelMatcher(["doc-7", "handbook/guide.md", "./ops/review.pdf"])
    assert match({"document_id": "doc-7", "source": "/x/y.md"}) == "doc-7"
    assert match({"document_id": "d1", "source": "/srv/docs/handbook/guide.md"}) == "handbook/guide.md"
    assert match({"document_id": "d2", "source": "/srv/ops/review.pdf"}) == "./ops/review.pdf"
    assert match({"document_id": "d3", "source": "/srv/old-handbook/guide.md"}) == "d3"
    assert list(parse_scopes(["ann:a,b", "bob", "ann:c"])) == ["ann:a,b", "bob", "ann:c"]


def test_eval_table_json_and_plot(sample_store: list[str], tmp_path: Path) -> None:
    png = tmp_path / "plots" / "recall.png"
    res = run_cli("eval", QUESTIONS, "--modes", "dense,text,hybrid", "--plot", png, *sample_store)
    assert res.returncode == 0, res.stderr
    for row in ("recall@1", "recall@3", "recall@5", "recall@10", "ndcg@10", "mrr@10", "latency_p50_ms"):
        assert row in res.stdout
    header = next(line for line in res.stdout.splitlines() if "metric" in line)
    assert header.index("dense") < header.index("text") < header.index("hybrid")
    assert "by its own user" in " ".join(res.stdout.split())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "warning" not in res.stderr, res.stderr

    res = run_cli("eval", QUESTIONS, "--modes", "dense,hybrid", "--k", "1,5", "--json", *sample_store)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["num_queries"] == 19 and data["ks"] == [1, 5] and data["missing_relevant"] == []
    assert set(data["reports"]) == {"dense", "hybrid"}
    for mode, report in data["reports"].items():
        assert report["mode"] == mode and report["principal"] == "per-question"
        assert {"recall@1", "recall@5", "precision@5", "ndcg@10", "mrr@10"} <= set(report["metrics"])
        assert len(report["per_query"]) == 19
        assert report["metrics"]["recall@5"] >= 0.8, report["metrics"]  # a small corpus, asked by readers
    assert data["reports"]["hybrid"]["metrics"]["recall@1"] >= 0.5


def test_missing_user_is_a_one_line_error(tmp_path: Path) -> None:
    questions = tmp_path / "q.yaml"
    questions.write_text(yaml.safe_dump({"questions": [{"id": "a", "question": "Leave days?", "relevant": ["x.md"]}]}))
    res = run_cli("eval", questions, "--config", tmp_path / "absent-is-fine.yaml")
    assert res.returncode == 2
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "name no user" in res.stderr and "--user" in res.stderr
    assert res.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "either a labelled questions YAML or --beir"),
        ([QUESTIONS, "--ingest"], "--ingest needs --beir"),
        ([QUESTIONS, "--k", "0,5"], "positive integers"),
        ([QUESTIONS, "--modes", "dense,sparse"], "dense,text,hybrid"),
    ],
)
def test_bad_input_is_exit_2(args: list[str | Path], message: str) -> None:
    res = run_cli("eval", *args)
    assert res.returncode == 2
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert message in res.stderr


BEIR_DOCS = [
    ("d1", "Sourdough baking", "Sourdough bread rises with a wild yeast starter fed with flour and water."),
    ("d2", "Volcanoes", "Basaltic lava from shield volcanoes flows far because of its low viscosity."),
    ("d3", "Chess openings", "The Sicilian Defence answers the king's pawn opening with c5."),
    ("d4", "Honeybees", "Honeybee workers perform a waggle dance to tell the hive where nectar is."),
    ("d5", "Tides", "Ocean tides are caused by the gravitational pull of the moon and the sun."),
]
BEIR_QUERIES = [
    ("q1", "How does a sourdough starter make bread rise?", "d1"),
    ("q2", "Why does lava from shield volcanoes flow so far?", "d2"),
    ("q3", "What does the honeybee waggle dance communicate?", "d4"),
]


def make_beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    with (root / "corpus.jsonl").open("w") as fh:
        for doc_id, title, text in BEIR_DOCS:
            fh.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (root / "queries.jsonl").open("w") as fh:
        for qid, text, _ in BEIR_QUERIES:
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] + [f"{qid}\t{doc}\t1" for qid, _, doc in BEIR_QUERIES]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return root


def test_beir_ingest_and_eval(fresh_dsn: str, tmp_path: Path) -> None:
    beir = make_beir(tmp_path / "tiny-beir")
    store = write_config(tmp_path, fresh_dsn)
    res = run_cli(
        "eval", "--beir", beir, "--ingest", "--user", "eve", "--groups", "lab",
        "--modes", "dense,text,hybrid", "--k", "1,5", "--json", *store,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["evalset"] == "tiny-beir/test" and data["num_queries"] == 3
    assert "5 added" in data["ingest"], data["ingest"]
    for mode, report in data["reports"].items():
        assert report["metrics"]["recall@5"] == 1.0, (mode, report["metrics"])
    assert data["reports"]["hybrid"]["metrics"]["recall@1"] == 1.0
    assert data["reports"]["hybrid"]["per_query"][0]["retrieved"][0] == "d1"

    res = run_cli("eval", "--beir", beir, "--limit-queries", "2", "--as", "eve:lab", "--as", "mallory:other", *store)
    assert res.returncode == 0, res.stderr
    assert "tiny-beir/test: 2 questions" in res.stdout
    assert "eve" in res.stdout and "mallory" in res.stdout


def test_as_compares_principals_side_by_side(sample_store: list[str]) -> None:
    res = run_cli(
        "eval", QUESTIONS, "--as", "priya:all-staff,hr,engineering,mission-ops", "--as", "guest:visitors",
        "--k", "1,5", "--json", *sample_store,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    reports = json.loads(res.stdout)["reports"]
    assert list(reports) == ["priya", "guest"]
    assert reports["priya"]["principal"] == "priya" and reports["priya"]["metrics"]["recall@5"] >= 0.8
    assert reports["guest"]["metrics"]["recall@5"] == 0.0
    assert all(row["retrieved"] == [] for row in reports["guest"]["per_query"]), "guest may read nothing"
