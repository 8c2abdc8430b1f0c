"""Shared set-up for benchmarks: a fresh embedded store in a temporary folder."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
SCIFACT = SHARED / "data" / "scifact"


def fresh_database(server_dsn: str, name: str) -> str:
    """Create (or recreate) database ``name`` on the server; return its DSN."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(server_dsn, dbname=name)


def temp_data_dir(prefix: str) -> Path:
    """A fresh folder for the benchmark's embedded store, removed when the benchmark exits (each holds a
    PostgreSQL cluster of a gigabyte or more; a day of runs filled the disk). ERAG_KEEP_BENCH_DIR=1 keeps it."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    if not os.environ.get("ERAG_KEEP_BENCH_DIR"):
        atexit.register(shutil.rmtree, path, True)
    return path


def iter_scifact(limit: int | None = None) -> Iterator[dict[str, str]]:
    if not (SCIFACT / "corpus.jsonl").is_file():
        raise SystemExit(f"SciFact not found at {SCIFACT}")
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            if limit is not None and i >= limit:
                return
            yield json.loads(line)
