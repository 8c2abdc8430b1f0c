"""Child processes that the fault tests SIGKILL at a chosen point (not a test module).

``python -m tests.support.fault_scripts ingest DSN FOLDER``: ingests FOLDER one document per write
batch; after the first batch commits it locks ``rag_documents`` from a second connection, so
the next batch blocks inside its write transaction, where the test kills the process.

``python -m tests.support.fault_scripts query DSN MARKER``: answers the workflow test question with
scripted LLMs whose support check writes MARKER and then blocks forever.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from enterprise_rag import EnterpriseRAG
from enterprise_rag.config import load_settings
from enterprise_rag.providers.local_embedding import LocalMiniLMEmbedding


def _rag(dsn: str, **overrides: Any) -> EnterpriseRAG:
    settings = load_settings(None, database={"dsn": dsn}, **overrides.pop("settings", {}))
    data_dir = Path(tempfile.mkdtemp(prefix="erag-child-", dir="/tmp"))
    return EnterpriseRAG(data_dir=data_dir, settings=settings, embed_model=LocalMiniLMEmbedding(), **overrides)


def ingest(dsn: str, folder: str) -> None:
    held: list[psycopg.Connection] = []

    def lock_after_first_batch(source: str, outcome: str) -> None:
        if not held:
            conn = psycopg.connect(dsn)
            conn.execute("LOCK TABLE rag_documents IN EXCLUSIVE MODE")  # the transaction stays open
            held.append(conn)

    rag = _rag(dsn, settings={"ingest": {"write_batch_size": 1}})
    rag.ingest(folder, progress=lock_after_first_batch)
    raise SystemExit("the ingest finished: it should have been killed while blocked")


def query(dsn: str, marker: str) -> None:
    from tests.support.workflow import ALICE, QUESTION, RESTATED, llms, writes

    def block_in_check(messages: list[Any], kwargs: dict[str, Any]) -> Any:
        Path(marker).write_text("in check")
        while True:
            time.sleep(1)

    generator, grader = llms(generate=writes(RESTATED), support=block_in_check)
    _rag(dsn, generator=generator, grader=grader).query(QUESTION, user=ALICE)


if __name__ == "__main__":
    {"ingest": ingest, "query": query}[sys.argv[1]](*sys.argv[2:])
