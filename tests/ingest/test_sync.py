"""Folder sync on the real store: add, change, rename, delete, a dry run, a second run that does nothing,
other roots untouched, deleted documents retrievable by nobody; and ``enterprise-rag sync``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.errors import IngestError
from tests.conftest import REPO
from tests.support.ingest import assert_consistent, query_rows

STAFF = Principal(user_id="kim", groups=["staff"])
ADMIN = Principal(user_id="root-reader", groups=["staff", "hr", "finance"])
DOCS = {
    "leave.md": "# Leave\n\nStaff get 27 days of annual leave.\n",
    "travel/trains.md": "# Trains\n\nBook trains through the travel portal.\n",
    "travel/hotels.md": "# Hotels\n\nHotels cost at most 120 EUR per night.\n",
}


def _write(root: Path, docs: dict[str, str]) -> Path:
    for name, text in docs.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _sources(rag: EnterpriseRAG, question: str, who: Principal = ADMIN) -> set[str]:
    return {Path(n.node.metadata["source"]).name for n in rag.retrieve(question, user=who, top_k=10)}


def test_sync_adds_changes_renames_and_deletes_and_a_second_run_does_nothing(
    rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path
) -> None:
    root = _write(tmp_path / "share", DOCS)
    other = _write(tmp_path / "other", {"pay.md": "# Pay\n\nSalaries are paid on the 25th.\n"})
    rag.ingest(other, allowed_groups=["staff"])

    first = rag.sync(root, allowed_groups=["staff"])
    assert len(first.added) == 3 and not (first.updated or first.deleted or first.failed)
    assert rag.sync(root, allowed_groups=["staff"]).summary().startswith("0 added, 0 updated, 3 unchanged, 0 failed")

    (root / "leave.md").write_text("# Leave\n\nStaff get 30 days of annual leave.\n")  # changed
    (root / "travel" / "hotels.md").rename(root / "travel" / "lodging.md")  # renamed
    (root / "travel" / "trains.md").unlink()  # deleted
    _write(root, {"new/parking.md": "# Parking\n\nVisitors park in bay C.\n"})  # added

    plan = rag.sync(root, allowed_groups=["staff"], dry_run=True)
    names = {k: sorted(Path(p).name for p in getattr(plan, k)) for k in ("added", "updated", "deleted", "unchanged")}
    assert names == {"added": ["lodging.md", "parking.md"], "updated": ["leave.md"],
                     "deleted": ["hotels.md", "trains.md"], "unchanged": []}  # fmt: skip
    assert plan.dry_run and plan.nodes_written == 0 and plan.summary().startswith("plan (dry run, nothing written)")
    assert _sources(rag, "trains travel portal") >= {"trains.md"}  # the plan changed nothing

    done = rag.sync(root, allowed_groups=["staff"])
    assert {k: sorted(Path(p).name for p in getattr(done, k)) for k in names} == names
    assert done.embeddings_reused >= 1  # the renamed file's unchanged chunk kept its vector
    for who in (STAFF, ADMIN):
        assert not {"trains.md", "hotels.md"} & _sources(rag, "Book trains through the travel portal hotels", who)
    assert "lodging.md" in _sources(rag, "hotel price per night")
    assert "pay.md" in _sources(rag, "When are salaries paid?")  # another root is untouched
    stored = {Path(s).name for (s,) in query_rows(fresh_dsn, "SELECT source FROM rag_documents")}
    assert stored == {"leave.md", "lodging.md", "parking.md", "pay.md"}
    assert_consistent(fresh_dsn)

    again = rag.sync(root, allowed_groups=["staff"])
    assert (again.added, again.updated, again.deleted, again.nodes_written) == ([], [], [], 0)


def test_sources_read_relative_to_the_folder_they_were_ingested_from(
    rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path
) -> None:
    """Nodes carry the source relative to the ingested folder (a lone file: its name) beside the full path;
    delete and sync still work by path, and a sync of the same folder rewrites nothing."""
    root = _write(tmp_path / "share", DOCS)
    memo = _write(tmp_path, {"memo.md": "# Memo\n\nThe canteen opens at noon.\n"}) / "memo.md"
    assert len(rag.ingest(root, allowed_groups=["staff"]).added) == 3
    assert len(rag.ingest(memo, allowed_groups=["staff"]).added) == 1

    def shown() -> dict[str, str]:
        hits = rag.retrieve("leave trains hotels canteen", user=ADMIN, top_k=10)
        return {n.node.metadata["relative_source"]: n.node.metadata["source"] for n in hits}

    assert shown() == {
        "leave.md": str(root.resolve() / "leave.md"),
        "travel/trains.md": str(root.resolve() / "travel" / "trains.md"),
        "travel/hotels.md": str(root.resolve() / "travel" / "hotels.md"),
        "memo.md": str(memo.resolve()),
    }
    assert rag.sync(root, allowed_groups=["staff"]).summary().startswith("0 added, 0 updated, 3 unchanged")
    assert rag.delete(root / "travel" / "hotels.md")
    assert set(shown()) == {"leave.md", "travel/trains.md", "memo.md"}
    assert_consistent(fresh_dsn)


def test_a_missing_root_is_an_error_and_deletes_nothing(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    root = _write(tmp_path / "share", DOCS)
    rag.sync(root, allowed_groups=["staff"])
    root.rename(tmp_path / "unmounted")
    with pytest.raises(IngestError, match="sync needs a folder that exists"):
        rag.sync(root, allowed_groups=["staff"])
    assert len(query_rows(fresh_dsn, "SELECT 1 FROM rag_documents")) == 3


def test_a_file_that_now_fails_to_parse_keeps_its_document(rag: EnterpriseRAG, tmp_path: Path) -> None:
    root = _write(tmp_path / "share", DOCS)
    rag.sync(root, allowed_groups=["staff"])
    (root / "leave.md").write_bytes("# Leave\n\nCong\u00e9s: 27 jours.\n".encode("latin-1"))  # not UTF-8
    report = rag.sync(root, allowed_groups=["staff"])
    assert [Path(f.path).name for f in report.failed] == ["leave.md"] and report.deleted == []
    assert "leave.md" in _sources(rag, "annual leave days")


def test_the_sync_command_prints_the_plan_then_syncs(fresh_dsn: str, tmp_path: Path) -> None:
    root = _write(tmp_path / "share", DOCS)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"database": {"dsn": fresh_dsn}}))
    script = REPO / ".venv" / "bin" / "enterprise-rag"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "enterprise_rag.cli"]
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ENTERPRISE_RAG_")} | {"COLUMNS": "300"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*command, "sync", str(root), "--groups", "staff", *args, "--config", str(config),
                               "--data-dir", str(tmp_path / "data")],
                              capture_output=True, text=True, env=env, timeout=300, check=False)  # fmt: skip

    plan = run("--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "plan (dry run, nothing written): 3 to add" in plan.stdout and plan.stdout.count("would add") == 3
    assert query_rows(fresh_dsn, "SELECT 1 FROM rag_documents") == []
    (root / "travel" / "trains.md").unlink()
    synced = run("--json")
    assert synced.returncode == 0, synced.stderr
    report = json.loads(synced.stdout)
    assert len(report["added"]) == 2 and report["deleted"] == [] and report["dry_run"] is False
