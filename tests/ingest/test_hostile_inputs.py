"""Hostile inputs not covered by test_ingest.py: a 100 MB file, a huge folder streamed with bounded
memory, symlinks out of the given root, FIFOs, overlapping roots and odd file names.

Each bad file fails alone with a reason; the rest lands; the store stays consistent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import psycopg
import pytest

from enterprise_rag import EnterpriseRAG
from enterprise_rag.errors import IngestError
from enterprise_rag.ingest.discovery import discover
from enterprise_rag.ingest.readers import read_document
from tests.support.ingest import assert_consistent, markdown_doc

MB = 1024 * 1024


def _sources(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return sorted(r[0] for r in conn.execute("SELECT source FROM rag_documents"))


def _doc(path: Path, title: str, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown_doc(title, f"## Section\n\n{body}", allowed_groups=["staff"]))
    return path


def test_a_100_mb_file_is_refused_by_its_size_without_being_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.md"
    with open(huge, "wb") as fh:  # sparse: 100 MB on paper
        fh.truncate(100 * MB)
    tracemalloc.start()
    try:
        with pytest.raises(IngestError, match=r"100(\.0)? MB, over the 25 MB limit"):
            read_document(huge, 25 * MB)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MB  # reading it would have allocated 100 MB


def test_a_file_growing_past_the_limit_is_never_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The size is checked before reading; a file that grows in between is read up to the limit only."""
    grower = tmp_path / "grower.md"
    grower.write_text("# Small\n\nsmall at stat time\n")
    real_stat = Path.stat

    def stat_then_grow(self: Path, **kwargs: object) -> os.stat_result:
        result = real_stat(self, **kwargs)  # type: ignore[arg-type]
        if self == grower:
            with open(grower, "ab") as fh:
                fh.truncate(50 * MB)
        return result

    monkeypatch.setattr(Path, "stat", stat_then_grow)
    tracemalloc.start()
    try:
        with pytest.raises(IngestError, match="grew past the 1 MB limit"):
            read_document(grower, MB)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MB


def _tree(root: Path, folders: int, per_folder: int) -> None:
    for i in range(folders):
        sub = root / f"d{i:03d}"
        sub.mkdir(parents=True)
        for j in range(per_folder):
            (sub / f"doc{j:04d}.md").touch()


_PEAK = """
import sys, tracemalloc
from enterprise_rag.ingest.discovery import discover
tracemalloc.start()
count = sum(1 for found in discover([sys.argv[1]], [".md"]) if found.reason is None)
print(count, tracemalloc.get_traced_memory()[1])
"""


def _discovery_peak(root: Path) -> tuple[int, int]:
    """Files found and the peak memory of the walk, in a process of its own (tracemalloc counts every
    thread's allocations, and threads left by other tests would count as the walk's)."""
    done = subprocess.run([sys.executable, "-c", _PEAK, str(root)], capture_output=True, text=True, check=True)
    count, peak = done.stdout.split()
    return int(count), int(peak)


@pytest.mark.timeout(180)
def test_discovery_streams_a_large_tree_with_memory_bounded_by_the_largest_folder(tmp_path: Path) -> None:
    """10x the files in 10x the folders of the same size must not need 10x the memory.

    (The 100,000-file figure is measured in benchmarks/reliability.py.)
    """
    _tree(tmp_path / "small", 10, 200)
    _tree(tmp_path / "large", 100, 200)
    small_count, small_peak = _discovery_peak(tmp_path / "small")
    large_count, large_peak = _discovery_peak(tmp_path / "large")
    assert (small_count, large_count) == (2_000, 20_000)
    assert large_peak < 2 * small_peak, (small_peak, large_peak)


def test_discovery_yields_the_first_file_before_walking_the_rest(tmp_path: Path) -> None:
    _tree(tmp_path, 3, 2)
    walker = discover([tmp_path], [".md"])
    first = next(walker)
    (tmp_path / "d002" / "late.md").touch()  # created after the walk started, in a folder not yet listed
    rest = list(walker)
    assert first.path.name == "doc0000.md"
    assert any(f.path.name == "late.md" for f in rest)


def test_symlinks_out_of_the_root_are_not_followed(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    root = (tmp_path / "root").resolve()
    outside = (tmp_path / "elsewhere").resolve()
    secret = _doc(outside / "secret.md", "Secret", "The vault code is 7741.")
    _doc(outside / "more" / "plans.md", "Plans", "The merger closes in May.")
    inside = _doc(root / "inside.md", "Inside", "The help desk opens at eight.")
    (root / "link-out.md").symlink_to(secret)
    (root / "dir-out").symlink_to(outside / "more", target_is_directory=True)
    (root / "zero.md").symlink_to("/dev/zero")
    (root / "alias.md").symlink_to(inside)  # a link inside the root: the target is ingested once

    report = rag.ingest(root)
    failed = {Path(f.path).name: f.reason for f in report.failed}
    assert set(failed) == {"link-out.md", "zero.md"}, failed
    assert "outside" in failed["link-out.md"] and "not followed" in failed["link-out.md"]
    assert "outside" in failed["zero.md"]
    assert report.added == [str(inside)]
    assert _sources(fresh_dsn) == [str(inside)]
    assert_consistent(fresh_dsn)


def test_a_symlinked_file_given_explicitly_is_the_callers_choice(rag: EnterpriseRAG, tmp_path: Path) -> None:
    target = _doc(tmp_path / "elsewhere" / "shared.md", "Shared", "The canteen opens at noon.")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    report = rag.ingest([link, target])
    assert report.added == [str(target.resolve())] and report.failed == []


@pytest.mark.timeout(60)
def test_a_fifo_named_md_fails_without_blocking(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    good = _doc(folder / "good.md", "Good", "Lunch is served at noon.")
    os.mkfifo(folder / "pipe.md")  # reading it would block forever
    report = rag.ingest(folder)
    assert [(Path(f.path).name, f.reason) for f in report.failed] == [("pipe.md", "not a regular file")]
    assert report.added == [str(good.resolve())]
    assert_consistent(fresh_dsn)


def test_overlapping_roots_yield_each_file_once(tmp_path: Path) -> None:
    a = _doc(tmp_path / "top" / "a.md", "A", "alpha")
    b = _doc(tmp_path / "top" / "sub" / "b.md", "B", "beta")
    given = [tmp_path / "top" / "sub", b, tmp_path / "top", a, tmp_path / "top" / "sub"]
    found = [f.path for f in discover(given, [".md"])]
    assert sorted(found) == sorted([a.resolve(), b.resolve()])


def test_odd_file_names_are_stored_exactly(rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path) -> None:
    names = [
        "we\nird.md",
        "quote ' \" ; -- .md",
        "percent %_\\.md",
        "unicode-\u00e9\u4e2d\u6587-\U0001f600.md",
        "-dash.md",
    ]
    folder = tmp_path / "odd"
    for i, name in enumerate(names):
        _doc(folder / name, f"Doc {i}", f"Fact number {i} is written here.")
    report = rag.ingest(folder)
    assert report.failed == []
    assert _sources(fresh_dsn) == sorted(str((folder / n).resolve()) for n in names)
    assert_consistent(fresh_dsn)
