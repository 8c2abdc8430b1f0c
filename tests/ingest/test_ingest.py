"""Ingestion acceptance: ACL stamping, metadata, lifecycle, atomic replace, fail-closed and bad inputs.

Everything runs against the session's real embedded PostgreSQL and the real local
embedding model; the scenario corpus is read in place from ../shared/scenarios.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from pypdf import PdfReader, PdfWriter

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.ingest.pipeline import Ingestor
from enterprise_rag.ingest.readers import read_document
from enterprise_rag.schema.documents import LoadedDocument, document_id_for
from tests.conftest import SCENARIOS
from tests.support.databases import create_db, drop_db
from tests.support.ingest import assert_consistent, markdown_doc, query_rows

if not (SCENARIOS / "scenarios.yaml").is_file():
    pytest.skip("scenarios not available", allow_module_level=True)

SUITE = yaml.safe_load((SCENARIOS / "scenarios.yaml").read_text())
DOCS: list[dict[str, Any]] = SUITE["documents"]
MARKDOWN_DOCS = [d for d in DOCS if d["path"].endswith(".md")]
PDF = SCENARIOS / "docs" / "guides" / "reflection-guide.pdf"
META_KEYS = {"source", "page", "document_id", "title", "effective_date", "status"}


# --- helpers ---------------------------------------------------------------------------------------


def _source(path: Path) -> str:
    return str(path.resolve())


def _node_versions(dsn: str) -> dict[str, tuple[str, str]]:
    """node_id -> (document_id, xmin): any rewrite of a row changes its xmin."""
    return {r[0]: (r[1], r[2]) for r in query_rows(dsn, "SELECT node_id, document_id, xmin::text FROM rag_nodes")}


def _acl(dsn: str, source: str) -> tuple[list[str], list[str], set[tuple[tuple[str, ...], tuple[str, ...]]]]:
    """(document groups, document users, distinct (groups, users) over its nodes)."""
    rows = query_rows(dsn, "SELECT document_id, allowed_groups, allowed_users FROM rag_documents WHERE source = %s",
                  (source,))  # fmt: skip
    assert len(rows) == 1, f"{source} not stored exactly once: {rows}"
    doc_id, groups, users = rows[0]
    nodes = query_rows(dsn, "SELECT allowed_groups, allowed_users FROM rag_nodes WHERE document_id = %s", (doc_id,))
    assert nodes, f"{source} has no nodes"
    return groups, users, {(tuple(g), tuple(u)) for g, u in nodes}


def _copy_markdown(dest: Path, count: int | None = None) -> list[Path]:
    """Copy scenario markdown docs (front-matter ACLs included) into ``dest``; return the copies."""
    copies = []
    for doc in MARKDOWN_DOCS[:count]:
        target = dest / doc["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SCENARIOS / doc["path"], target)
        copies.append(target)
    return copies


# --- the scenario corpus, ingested once per module (tests below only read it) ---------------------


class Corpus:
    def __init__(self, rag: EnterpriseRAG, dsn: str) -> None:
        self.rag = rag
        self.dsn = dsn


@pytest.fixture(scope="module")
def corpus(server_dsn: str, tmp_path_factory: pytest.TempPathFactory, embed_model) -> Iterator[Corpus]:  # type: ignore[no-untyped-def]
    name = f"ingest_corpus_{os.getpid()}"
    dsn = create_db(server_dsn, name)
    settings = load_settings(None, database={"dsn": dsn})
    rag = EnterpriseRAG(data_dir=tmp_path_factory.mktemp("corpus") / "data", settings=settings, embed_model=embed_model)
    for doc in DOCS:
        report = rag.ingest([SCENARIOS / doc["path"]], allowed_groups=doc["allowed_groups"])
        assert not report.failed, report.failed
        assert report.added == [_source(SCENARIOS / doc["path"])]
    yield Corpus(rag, dsn)
    rag.close()
    drop_db(server_dsn, name)


def test_every_scenario_document_carries_its_acl(corpus: Corpus) -> None:
    stored = {r[0] for r in query_rows(corpus.dsn, "SELECT source FROM rag_documents")}
    assert stored == {_source(SCENARIOS / d["path"]) for d in DOCS}
    for doc in DOCS:
        groups, users, node_acls = _acl(corpus.dsn, _source(SCENARIOS / doc["path"]))
        assert groups == sorted(doc["allowed_groups"]), doc["path"]
        assert users == []
        assert node_acls == {(tuple(sorted(doc["allowed_groups"])), ())}, doc["path"]
    assert_consistent(corpus.dsn)


def test_node_metadata_has_the_contract_fields(corpus: Corpus) -> None:
    for doc in DOCS:
        path = SCENARIOS / doc["path"]
        (doc_id, title, status, effective), = query_rows(
            corpus.dsn, "SELECT document_id, title, status, effective_date FROM rag_documents WHERE source = %s",
            (_source(path),),
        )  # fmt: skip
        assert doc_id == document_id_for(_source(path))
        rows = query_rows(corpus.dsn, "SELECT metadata, status FROM rag_nodes WHERE document_id = %s", (doc_id,))
        for meta, node_status in rows:
            assert meta.keys() >= META_KEYS, (doc["path"], sorted(meta))
            assert meta["source"] == _source(path)
            assert meta["document_id"] == doc_id
            assert meta["title"] == title
            assert meta["status"] == status == node_status
            assert meta["effective_date"] == (effective.isoformat() if effective else None)
            if path.suffix == ".md":
                assert meta["page"] is None
        if path.suffix == ".md":
            front = yaml.safe_load(path.read_text().split("---")[1])
            assert title == front["title"]
            assert status == front["status"]
            assert effective == front["effective_date"]
    # the superseded policy keeps its status on every node (retrieval demotes it)
    superseded = query_rows(
        corpus.dsn, "SELECT DISTINCT n.status FROM rag_nodes n JOIN rag_documents d USING (document_id)"
        " WHERE d.source LIKE %s", ("%refund-policy-2023.md",),
    )  # fmt: skip
    assert superseded == [("superseded",)]


def test_pdf_nodes_carry_their_page(corpus: Corpus) -> None:
    doc_id = document_id_for(_source(PDF))
    pages = query_rows(corpus.dsn, "SELECT metadata->'page', metadata->'pages' FROM rag_nodes WHERE document_id = %s",
                   (doc_id,))  # fmt: skip
    assert pages
    for page, spanned in pages:
        assert isinstance(page, int) and 1 <= page <= 7, page
        assert spanned and spanned[0] == page and all(1 <= p <= 7 for p in spanned)

    def leaf_pages(needle: str) -> set[int]:
        rows = query_rows(
            corpus.dsn, "SELECT (metadata->'page')::int FROM rag_nodes"
            " WHERE document_id = %s AND is_leaf AND text LIKE %s", (doc_id, f"%{needle}%"),
        )  # fmt: skip
        assert rows, f"no leaf contains {needle!r}"
        return {r[0] for r in rows}

    # the six-item scorecard list is split across the page 4/5 boundary
    assert leaf_pages("1. Depth of Inquiry") == {4}
    assert leaf_pages("4. Lesson Capture") == {5}
    assert 4 in leaf_pages("Depth of Inquiry")
    assert 5 in leaf_pages("Lesson Capture")


def test_leaves_carry_heading_breadcrumbs(corpus: Corpus) -> None:
    source = _source(SCENARIOS / "docs" / "billing" / "refund-policy-2025.md")
    leaves = query_rows(
        corpus.dsn, "SELECT n.breadcrumb, n.metadata->>'breadcrumb', n.text FROM rag_nodes n"
        " JOIN rag_documents d USING (document_id) WHERE d.source = %s AND n.is_leaf", (source,),
    )  # fmt: skip
    assert leaves
    for crumb, meta_crumb, _ in leaves:
        assert crumb == meta_crumb
        assert crumb.startswith("Refund Policy")
    annual = [(crumb, text) for crumb, _, text in leaves if "Annual plans" in crumb]
    assert annual, [c for c, _, _ in leaves]
    assert all(c.split(" > ")[-2:] == ["6. Subscription terms", "6.2 Annual plans"] for c, _ in annual)
    # the sub-section's own text never says "refund policy": the breadcrumb is what carries it
    assert any("refund policy" not in text.lower() for _, text in annual)
    # every leaf of every document has a breadcrumb starting at its document title
    missing = query_rows(
        corpus.dsn, "SELECT n.node_id FROM rag_nodes n JOIN rag_documents d USING (document_id)"
        " WHERE n.is_leaf AND (n.breadcrumb = '' OR NOT starts_with(n.breadcrumb, d.title))",
    )  # fmt: skip
    assert missing == []


def test_reingesting_the_unchanged_corpus_writes_nothing(corpus: Corpus) -> None:
    before = _node_versions(corpus.dsn)
    docs_before = query_rows(corpus.dsn, "SELECT document_id, xmin::text FROM rag_documents ORDER BY 1")
    for doc in DOCS:
        report = corpus.rag.ingest([SCENARIOS / doc["path"]], allowed_groups=doc["allowed_groups"])
        assert report.unchanged == [_source(SCENARIOS / doc["path"])]
        assert (report.added, report.updated, report.failed) == ([], [], [])
        assert report.nodes_written == 0 and report.leaves_embedded == 0
    assert _node_versions(corpus.dsn) == before
    assert query_rows(corpus.dsn, "SELECT document_id, xmin::text FROM rag_documents ORDER BY 1") == docs_before


# --- lifecycle on copies in tmp_path ----------------------------------------------------------------


def test_reingesting_an_unchanged_folder_writes_nothing(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    copies = _copy_markdown(folder, 4)
    first = rag.ingest(folder)
    assert sorted(first.added) == sorted(_source(p) for p in copies) and not first.failed
    before = _node_versions(fresh_dsn)

    again = rag.ingest(folder)
    assert sorted(again.unchanged) == sorted(_source(p) for p in copies)
    assert (again.added, again.updated, again.failed) == ([], [], [])
    assert again.nodes_written == 0 and again.leaves_embedded == 0
    assert _node_versions(fresh_dsn) == before
    # the front-matter ACLs are the ones scenarios.yaml lists
    for doc, path in zip(MARKDOWN_DOCS, copies, strict=False):
        assert _acl(fresh_dsn, _source(path))[0] == sorted(doc["allowed_groups"])


def test_changing_one_file_replaces_only_its_nodes(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    copies = _copy_markdown(folder, 4)
    assert len(rag.ingest(folder).added) == 4
    before = _node_versions(fresh_dsn)

    changed = copies[0]
    text = changed.read_text()
    old_paragraph = next(p for p in text.split("\n\n") if len(p) > 80 and not p.startswith(("#", "---", "|", "-")))
    old_words = " ".join(old_paragraph.split())[:80]  # as stored: soft line breaks joined
    new_sentence = "Zebra-striped onboarding forms are mandatory from 2031 onwards."
    changed_id = document_id_for(_source(changed))

    def stored_texts() -> list[str]:
        rows = query_rows(fresh_dsn, "SELECT text FROM rag_nodes WHERE document_id = %s", (changed_id,))
        return [" ".join(r[0].split()) for r in rows]

    assert any(old_words in t for t in stored_texts())
    changed.write_text(text.replace(old_paragraph, new_sentence))

    report = rag.ingest(folder)
    changed_source = _source(changed)
    assert report.updated == [changed_source]
    assert sorted(report.unchanged) == sorted(_source(p) for p in copies[1:])
    assert (report.added, report.failed) == ([], [])
    assert report.nodes_written > 0

    after = _node_versions(fresh_dsn)
    # other documents' nodes: same ids, rows never rewritten
    assert {k: v for k, v in after.items() if v[0] != changed_id} == {
        k: v for k, v in before.items() if v[0] != changed_id
    }
    # the changed document's nodes are all new rows
    old_rows = {k: v for k, v in before.items() if v[0] == changed_id}
    new_rows = {k: v for k, v in after.items() if v[0] == changed_id}
    assert new_rows and not (set(old_rows.items()) & set(new_rows.items()))
    texts = stored_texts()
    assert not any(old_words in t for t in texts), "old text still stored"
    assert any(new_sentence in t for t in texts)
    (content_hash,) = query_rows(fresh_dsn, "SELECT content_hash FROM rag_documents WHERE document_id = %s",
                             (changed_id,))[0]  # fmt: skip
    assert content_hash == hashlib.sha256(changed.read_bytes()).hexdigest()
    assert_consistent(fresh_dsn)


def test_changing_only_the_acl_updates_document_and_all_nodes(
    rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path
) -> None:
    (path,) = _copy_markdown(tmp_path, 1)
    source = _source(path)
    assert rag.ingest(path, allowed_groups=["alpha"]).added == [source]
    assert _acl(fresh_dsn, source) == (["alpha"], [], {(("alpha",), ())})

    report = rag.ingest(path, allowed_groups=["gamma", "beta"], allowed_users=["erin"])
    assert report.updated == [source]
    assert report.leaves_embedded == 0 and report.embeddings_reused > 0  # same text: vectors reused
    assert _acl(fresh_dsn, source) == (["beta", "gamma"], ["erin"], {(("beta", "gamma"), ("erin",))})

    report = rag.ingest(path, allowed_groups=["gamma", "beta"], allowed_users=["erin"])
    assert report.unchanged == [source]
    assert_consistent(fresh_dsn)


def test_delete_by_path_and_by_id_leaves_no_orphans(
    rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, third = _copy_markdown(tmp_path / "corpus", 3)
    assert len(rag.ingest(tmp_path / "corpus").added) == 3
    kept_nodes = {k: v for k, v in _node_versions(fresh_dsn).items() if v[0] == document_id_for(_source(third))}

    assert rag.delete(first) is True  # by path (a Path)
    second_id = document_id_for(_source(second))
    assert rag.delete(second_id) is True  # by document id
    for gone in (first, second):
        doc_id = document_id_for(_source(gone))
        assert query_rows(fresh_dsn, "SELECT 1 FROM rag_documents WHERE document_id = %s", (doc_id,)) == []
        assert query_rows(fresh_dsn, "SELECT 1 FROM rag_nodes WHERE document_id = %s", (doc_id,)) == []
    assert query_rows(fresh_dsn, "SELECT source FROM rag_documents") == [(_source(third),)]
    assert _node_versions(fresh_dsn) == kept_nodes
    assert_consistent(fresh_dsn)

    assert rag.delete(str(first)) is False  # already gone
    assert rag.delete(second_id) is False
    assert rag.delete("doc_000000000000000000000000") is False
    assert rag.delete(tmp_path / "never-ingested.md") is False

    # a relative path resolves against the working directory, like at ingest time
    monkeypatch.chdir(third.parent)
    assert rag.delete(third.name) is True
    assert query_rows(fresh_dsn, "SELECT count(*) FROM rag_nodes") == [(0,)]


# --- atomic replace ----------------------------------------------------------------------------------


def _versioned(version: int, sections: int) -> str:
    body = "\n\n".join(
        f"## Section {i}\n\nRelease marker-v{version}: step {i} of the rollout checklist is owned by team {i} "
        f"and must be signed off before the window closes."
        for i in range(sections)
    )
    return markdown_doc("Rollout Checklist", body, allowed_groups=["ops"])


@pytest.mark.timeout(120)
def test_concurrent_readers_see_exactly_one_version(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "rollout.md"
    doc_id = document_id_for(_source(path))
    versions = {1: _versioned(1, 5), 2: _versioned(2, 8)}
    leaf_counts = {}
    for v, text in versions.items():
        path.write_text(text)
        rag.ingest(path)
        leaf_counts[v] = query_rows(fresh_dsn, "SELECT count(*) FROM rag_nodes WHERE document_id = %s AND is_leaf",
                                (doc_id,))[0][0]  # fmt: skip
    assert leaf_counts[1] != leaf_counts[2]

    snapshots: list[tuple[list[str], int]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            with psycopg.connect(fresh_dsn, autocommit=True) as conn:
                while not stop.is_set():
                    # one statement = one snapshot
                    seen, leaves = conn.execute(
                        "SELECT coalesce(array_agg(DISTINCT substring(text from 'marker-v([0-9]+)')), '{}'), count(*)"
                        " FROM rag_nodes WHERE document_id = %s AND is_leaf", (doc_id,),
                    ).fetchone()  # type: ignore[misc]  # fmt: skip
                    snapshots.append((seen, leaves))
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for v in (1, 2, 1, 2, 1, 2):
            path.write_text(versions[v])
            report = rag.ingest(path)
            assert report.updated == [_source(path)], report.summary()
            time.sleep(0.02)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not errors, errors
    assert len(snapshots) >= 20, "the reader barely ran"
    for seen, leaves in snapshots:
        assert len(seen) == 1, f"snapshot saw versions {seen} ({leaves} leaves)"
        assert leaves == leaf_counts[int(seen[0])], (seen, leaves)
    assert {s[0][0] for s in snapshots} == {"1", "2"}, "the reader never observed a replacement"
    assert_consistent(fresh_dsn)


# --- fail closed on ACL ------------------------------------------------------------------------------


def test_document_without_acl_is_refused_while_others_land(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "ok.md").write_text(
        markdown_doc("Okay", "## Part\n\nThe cafeteria opens at eight.", allowed_groups=["staff"])
    )
    (tmp_path / "no-acl.md").write_text(markdown_doc("Secret", "## Part\n\nThe vault code rotates weekly."))
    (tmp_path / "plain.txt").write_text("Plain notes\n\nThe parking garage closes at ten.\n")
    report = rag.ingest(tmp_path)
    assert report.added == [_source(tmp_path / "ok.md")]
    failed = {f.path: f.reason for f in report.failed}
    assert set(failed) == {_source(tmp_path / "no-acl.md"), _source(tmp_path / "plain.txt")}
    for reason in failed.values():
        assert "ACL" in reason
    assert [r[0] for r in query_rows(fresh_dsn, "SELECT source FROM rag_documents")] == [_source(tmp_path / "ok.md")]
    assert query_rows(fresh_dsn, "SELECT count(*) FROM rag_nodes WHERE text LIKE '%vault%'") == [(0,)]
    assert_consistent(fresh_dsn)


def test_acl_arguments_override_front_matter(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "bands.md"
    path.write_text(markdown_doc("Bands", "## Bands\n\nBand 3 pays between 50 and 60.", allowed_groups=["hr"]))
    rag.ingest(path, allowed_groups=["finance"])
    assert _acl(fresh_dsn, _source(path)) == (["finance"], [], {(("finance",), ())})
    # users given alone replace the front-matter groups too: nothing of "hr" is left
    rag.ingest(path, allowed_users=["dana"])
    assert _acl(fresh_dsn, _source(path)) == ([], ["dana"], {((), ("dana",))})


def test_allowed_users_alone_is_an_acl(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    by_arg = tmp_path / "by-arg.txt"
    by_arg.write_text("Personal note\n\nThe review is on Thursday.\n")
    by_front = tmp_path / "by-front.md"
    by_front.write_text(markdown_doc("Review", "## When\n\nThe review is on Friday.", allowed_users=["erin", "dana"]))
    report = rag.ingest(by_arg, allowed_users=["dana"])
    assert report.added == [_source(by_arg)] and not report.failed
    report = rag.ingest(by_front)
    assert report.added == [_source(by_front)] and not report.failed
    assert _acl(fresh_dsn, _source(by_arg)) == ([], ["dana"], {((), ("dana",))})
    assert _acl(fresh_dsn, _source(by_front)) == ([], ["dana", "erin"], {((), ("dana", "erin"))})


def test_a_string_acl_argument_is_one_name(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "budget.txt"
    path.write_text("Budget\n\nThe travel budget is frozen until June.\n")
    assert rag.ingest(path, allowed_groups="finance", allowed_users="dana").added == [_source(path)]
    assert _acl(fresh_dsn, _source(path)) == (["finance"], ["dana"], {(("finance",), ("dana",))})
    assert rag.retrieve("travel budget", user=Principal("fay", ["finance"]))
    assert rag.retrieve("travel budget", user=Principal("fred", ["f"])) == []


def test_invalid_acl_names_fail_their_file_alone(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    folder = tmp_path / "batch"
    folder.mkdir()
    good = folder / "good.md"
    good.write_text(markdown_doc("Good", "## Hours\n\nThe desk opens at 8.", allowed_groups=["staff"]))
    front_matter = {  # file -> (front-matter ACL, words of the reason)
        "blank.md": ({"allowed_groups": ["staff", ""]}, ["allowed_groups", "empty"]),
        "number.md": ({"allowed_users": ["dana", 5]}, ["allowed_users", "list of names"]),
        "long.md": ({"allowed_groups": ["x" * 3000]}, ["allowed_groups", "2048 bytes"]),
    }
    for name, (acl, _) in front_matter.items():
        (folder / name).write_text(markdown_doc(name, "## Secret\n\nThe vault code rotates weekly.", **acl))
    report = rag.ingest(folder)
    assert report.added == [_source(good)]
    failed = {f.path: f.reason for f in report.failed}
    assert set(failed) == {_source(folder / name) for name in front_matter}
    for name, (_, words) in front_matter.items():
        for word in words:
            assert word in failed[_source(folder / name)], failed
    # names PostgreSQL cannot store, given as arguments: refused with a reason, not a driver error
    for groups in (["staff", "eng\ud800"], ["staff\x00"]):
        report = rag.ingest(folder / "blank.md", allowed_groups=groups)
        assert [f.path for f in report.failed] == [_source(folder / "blank.md")]
        assert "cannot be stored" in report.failed[0].reason
    assert query_rows(fresh_dsn, "SELECT source FROM rag_documents") == [(_source(good),)]
    assert query_rows(fresh_dsn, "SELECT count(*) FROM rag_nodes WHERE text LIKE '%vault%'") == [(0,)]
    assert_consistent(fresh_dsn)


# --- document identity -------------------------------------------------------------------------------


def _stored_document(dsn: str, document_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The document row and its nodes, with their row versions (any rewrite changes them)."""
    row = query_rows(dsn, "SELECT source, allowed_groups, allowed_users, content_hash, xmin::text FROM rag_documents"
                     " WHERE document_id = %s", (document_id,))  # fmt: skip
    nodes = query_rows(dsn, "SELECT node_id, text, allowed_groups, xmin::text FROM rag_nodes"
                       " WHERE document_id = %s ORDER BY node_id", (document_id,))  # fmt: skip
    return row, nodes


def test_a_document_id_of_another_source_fails_that_file_alone(
    rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path
) -> None:
    owner = tmp_path / "owner" / "salaries.md"
    owner.parent.mkdir()
    owner.write_text(markdown_doc("Salaries", "## Bands\n\nBand C starts at 61,000.", allowed_groups=["hr"],
                                  document_id="policy-7"))  # fmt: skip
    assert rag.ingest(owner).added == [_source(owner)]
    before = _stored_document(fresh_dsn, "policy-7")

    batch = tmp_path / "batch"
    batch.mkdir()
    forged = batch / "forged.md"  # claims the stored document's id
    forged.write_text(markdown_doc("Salaries", "## Bands\n\nBand C starts at 1.", allowed_groups=["all-staff"],
                                   document_id="policy-7"))  # fmt: skip
    first, second = batch / "a-claim.md", batch / "b-claim.md"  # both claim a new id: the first one has it
    for path in (first, second):
        path.write_text(markdown_doc(path.stem, f"## Note\n\nNote {path.stem}.", allowed_groups=["staff"],
                                     document_id="shared-9"))  # fmt: skip
    plain = batch / "plain.md"
    plain.write_text(markdown_doc("Plain", "## Lunch\n\nLunch is served at noon.", allowed_groups=["staff"]))

    report = rag.ingest(batch)
    assert report.added == [_source(first), _source(plain)]
    failed = {f.path: f.reason for f in report.failed}
    assert set(failed) == {_source(forged), _source(second)}
    assert "'policy-7' already belongs to another" in failed[_source(forged)]
    assert "'shared-9' already belongs to another" in failed[_source(second)]
    assert _source(owner) not in failed[_source(forged)] and _source(first) not in failed[_source(second)]
    assert _stored_document(fresh_dsn, "policy-7") == before  # text, ACL and source untouched
    assert query_rows(fresh_dsn, "SELECT count(*) FROM rag_nodes WHERE text LIKE '%starts at 1.%'") == [(0,)]
    assert query_rows(fresh_dsn, "SELECT source FROM rag_documents WHERE document_id = 'shared-9'") == [
        (_source(first),)
    ]

    # the source that owns an id re-ingests under it as usual
    owner.write_text(markdown_doc("Salaries", "## Bands\n\nBand C starts at 63,000.", allowed_groups=["hr"],
                                  document_id="policy-7"))  # fmt: skip
    assert rag.ingest(owner).updated == [_source(owner)]
    assert query_rows(fresh_dsn, "SELECT count(*) FROM rag_nodes WHERE document_id = 'policy-7'"
                      " AND is_leaf AND text LIKE '%63,000%'") == [(1,)]  # fmt: skip
    assert_consistent(fresh_dsn)


def test_a_document_id_taken_while_its_batch_is_prepared_fails_that_file_alone(
    rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path
) -> None:
    """The write itself refuses an id stored for another source since the file was checked."""
    claimant, owner, plain = tmp_path / "claimant.md", tmp_path / "owner.md", tmp_path / "plain.md"
    claimant.write_text(markdown_doc("Claim", "## A\n\nClaimed text.", allowed_groups=["all-staff"],
                                     document_id="policy-7"))  # fmt: skip
    owner.write_text(markdown_doc("Owner", "## A\n\nOwner text.", allowed_groups=["hr"], document_id="policy-7"))
    plain.write_text(markdown_doc("Plain", "## A\n\nPlain text.", allowed_groups=["staff"]))
    max_bytes = int(rag.settings.ingest.max_file_mb * 1024 * 1024)

    def documents() -> Iterator[LoadedDocument]:
        yield read_document(claimant, max_bytes)  # checked while the id is free
        assert rag.ingest(owner).added == [_source(owner)]  # then another ingest stores it
        yield read_document(plain, max_bytes)

    report = Ingestor(rag.db, rag.providers.embed_model, rag.settings.ingest).ingest_documents(documents())
    assert report.added == [_source(plain)]
    assert [(f.path, "'policy-7' already belongs to" in f.reason) for f in report.failed] == [(_source(claimant), True)]
    assert query_rows(fresh_dsn, "SELECT source, allowed_groups FROM rag_documents WHERE document_id = 'policy-7'") == [
        (_source(owner), ["hr"])
    ]
    assert query_rows(fresh_dsn, "SELECT count(*) FROM rag_nodes WHERE text LIKE '%Claimed%'") == [(0,)]
    assert_consistent(fresh_dsn)


# --- bad inputs in one batch -------------------------------------------------------------------------


def _encrypted_pdf() -> bytes:
    writer = PdfWriter(clone_from=PdfReader(PDF))
    writer.encrypt(user_password="s3cret", owner_password="owner")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.mark.timeout(120)
def test_bad_inputs_fail_alone_with_their_reason(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    folder = (tmp_path / "batch").resolve()
    (folder / "sub").mkdir(parents=True)
    good = {
        "good.md": markdown_doc("Good", "## Hours\n\nThe help desk answers from 8 to 18.", allowed_groups=["staff"]),
        "sub/also-good.md": markdown_doc("Also Good", "## Lunch\n\nLunch is served at noon.", allowed_groups=["staff"]),
        "sub/third.md": markdown_doc(
            "Third", "## Laptops\n\nThe library lends laptops for a week.", allowed_groups=["staff"]
        ),
    }
    for name, text in good.items():
        (folder / name).write_text(text)
    bad_bytes: dict[str, bytes] = {
        "corrupt.pdf": b"%PDF-1.7\n" + bytes(range(256)) * 4,
        "encrypted.pdf": _encrypted_pdf(),
        "empty.md": b"",
        "latin1.txt": "Caf\u00e9 opening hours\n\nWe open at nine.\n".encode("latin-1"),
        "binary.md": b"# Title\n\n\x00\x01\x02\x03 binary junk \x00\xff",
        "report.docx": b"PK\x03\x04 not really a word file",
        "bad-groups.md": markdown_doc("G", "## A\n\nText.", allowed_groups=5).encode(),
        "bad-date.md": markdown_doc(
            "D", "## A\n\nText.", allowed_groups=["staff"], effective_date="not a date"
        ).encode(),
        "bad-status.md": markdown_doc("S", "## A\n\nText.", allowed_groups=["staff"], status="bogus").encode(),
    }
    for name, data in bad_bytes.items():
        (folder / name).write_bytes(data)
    with open(folder / "huge.md", "wb") as fh:  # sparse: over the 25 MB default limit without writing it
        fh.truncate(int(rag.settings.ingest.max_file_mb * 1024 * 1024) + 1)
    (folder / "sub" / "loop").symlink_to(folder, target_is_directory=True)  # folder loop
    (folder / "self.md").symlink_to(folder / "self.md")  # link loop

    expected = {
        "corrupt.pdf": ["corrupt"],
        "encrypted.pdf": ["encrypted"],
        "empty.md": ["empty"],
        "latin1.txt": ["UTF-8"],
        "binary.md": ["binary"],
        "huge.md": ["limit", "25 MB"],
        "report.docx": ["corrupt or unreadable Word document"],
        "bad-groups.md": ["allowed_groups", "5"],
        "bad-date.md": ["effective_date", "not a date"],
        "bad-status.md": ["status", "bogus"],
        "self.md": ["resolve"],
    }
    started = time.perf_counter()
    report = rag.ingest(folder)
    assert time.perf_counter() - started < 60
    failed = {f.path: f.reason for f in report.failed}
    assert set(failed) == {str(folder / name) for name in expected}, failed
    for name, words in expected.items():
        reason = failed[str(folder / name)]
        for word in words:
            assert word.lower() in reason.lower(), (name, reason)
    assert sorted(report.added) == sorted(str(folder / name) for name in good), report.added  # each exactly once
    assert report.updated == [] and report.unchanged == []
    stored = sorted(r[0] for r in query_rows(fresh_dsn, "SELECT source FROM rag_documents"))
    assert stored == sorted(str(folder / name) for name in good)
    assert_consistent(fresh_dsn)


def test_configured_file_size_limit_is_enforced(fresh_dsn: str, tmp_path: Path, embed_model) -> None:  # type: ignore[no-untyped-def]
    settings = load_settings(None, database={"dsn": fresh_dsn}, ingest={"max_file_mb": 0.01})
    with EnterpriseRAG(data_dir=tmp_path / "data", settings=settings, embed_model=embed_model) as rag:
        small = tmp_path / "small.md"
        small.write_text(markdown_doc("Small", "## A\n\nShort enough.", allowed_groups=["staff"]))
        big = tmp_path / "big.md"
        big.write_text(
            markdown_doc("Big", "## A\n\n" + "Far too long a line of text. " * 500, allowed_groups=["staff"])
        )
        report = rag.ingest([small, big])
    assert report.added == [_source(small)]
    assert [(f.path, "limit" in f.reason) for f in report.failed] == [(_source(big), True)]
    assert "10.2 KB" in report.failed[0].reason
    assert_consistent(fresh_dsn)


# --- embedding dedup ---------------------------------------------------------------------------------


def _dedup_doc(unique: str) -> str:
    shared = "## Common rules\n\nBadges must be worn visibly at all times inside the north building."
    own = f"## Only here\n\n{unique}"
    return markdown_doc("Site Handbook", f"{shared}\n\n{own}", allowed_groups=["staff"])


def _leaf_hashes(dsn: str, path: Path) -> list[str]:
    rows = query_rows(dsn, "SELECT content_hash FROM rag_nodes WHERE document_id = %s AND is_leaf",
                  (document_id_for(_source(path)),))  # fmt: skip
    return [r[0] for r in rows]


def test_identical_sections_are_embedded_once(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text(_dedup_doc("Visitors sign in at the east desk."))
    b.write_text(_dedup_doc("Parcels are collected from the loading bay on Tuesdays."))

    first = rag.ingest(a)
    a_hashes = _leaf_hashes(fresh_dsn, a)
    assert first.leaves_embedded == len(set(a_hashes)) and first.embeddings_reused == 0

    second = rag.ingest(b)
    b_hashes = _leaf_hashes(fresh_dsn, b)
    shared = set(a_hashes) & set(b_hashes)
    assert shared, "the identical section should produce the same leaf search text"
    assert second.embeddings_reused == sum(1 for h in b_hashes if h in shared) > 0
    assert second.leaves_embedded == len(set(b_hashes) - set(a_hashes))
    # the shared leaf carries the very same vector in both documents
    vectors = query_rows(fresh_dsn, "SELECT DISTINCT embedding::text FROM rag_nodes WHERE content_hash = ANY(%s)",
                     (list(shared),))  # fmt: skip
    assert len(vectors) == len(shared)


def test_duplicates_within_one_batch_are_embedded_once(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(_dedup_doc("Visitors sign in at the east desk."))
    (tmp_path / "b.md").write_text(_dedup_doc("Parcels are collected from the loading bay on Tuesdays."))
    report = rag.ingest(tmp_path)
    assert len(report.added) == 2
    hashes = _leaf_hashes(fresh_dsn, tmp_path / "a.md") + _leaf_hashes(fresh_dsn, tmp_path / "b.md")
    assert report.leaves_embedded == len(set(hashes)) < len(hashes)
    assert report.embeddings_reused == len(hashes) - len(set(hashes))


def test_metadata_argument_lands_on_document_and_nodes(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "memo.txt"
    path.write_text("Memo\n\nThe quarterly review moves to March.\n")
    report = rag.ingest(path, allowed_groups=["staff"],
                        metadata={"department": "ops", "effective_date": "2025-01-31", "status": "draft"})  # fmt: skip
    assert report.added == [_source(path)]
    ((meta, status, effective),) = query_rows(
        fresh_dsn, "SELECT metadata, status, effective_date FROM rag_documents WHERE source = %s", (_source(path),)
    )
    assert meta == {"department": "ops"} and status == "draft" and effective == dt.date(2025, 1, 31)
    for (node_meta,) in query_rows(fresh_dsn, "SELECT metadata FROM rag_nodes"):
        assert node_meta["department"] == "ops"
        assert node_meta["effective_date"] == "2025-01-31" and node_meta["status"] == "draft"
        assert node_meta["page"] is None and node_meta["title"] == "Memo"


def test_writes_behind_the_next_batch_are_booked_on_the_callers_thread(
    fresh_dsn: str, tmp_path: Path, embed_model: Any
) -> None:
    """With one document per batch, each write runs while the next document is read and embedded; every
    outcome still reaches the report and ``progress`` on the caller's thread, and a document that claims an
    id taken by the batch before it (checked at read time or by the write, whichever comes first) fails alone."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in "abcdef":
        front = {"document_id": "shared-id"} if name in "de" else {}
        (docs / f"{name}.md").write_text(markdown_doc(f"Doc {name}", f"Section {name} of the handbook.", **front))
    calls: list[tuple[str, str, bool]] = []
    settings = load_settings(None, database={"dsn": fresh_dsn}, ingest={"write_batch_size": 1})
    with EnterpriseRAG(data_dir=tmp_path / "data", settings=settings, embed_model=embed_model) as rag:
        report = rag.ingest(docs, allowed_groups=["staff"], progress=lambda source, outcome: calls.append(
            (Path(source).name, outcome, threading.current_thread() is threading.main_thread())))  # fmt: skip
    assert sorted(calls) == [(f"{n}.md", "failed" if n == "e" else "added", True) for n in "abcdef"]
    assert sorted(Path(s).name for s in report.added) == ["a.md", "b.md", "c.md", "d.md", "f.md"]
    assert [Path(f.path).name for f in report.failed] == ["e.md"]
    assert "'shared-id' already belongs to another" in report.failed[0].reason
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM rag_nodes").fetchone() == (report.nodes_written,)
    assert_consistent(fresh_dsn)
