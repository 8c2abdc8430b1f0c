"""Faults: LLM and rerank services slow, down, rate-limited, failing or answering garbage;
the database restarted and the process killed in the middle of an ingest or a query.

The production providers run their real SDKs (openai, cohere) against respx-mocked HTTP
or a real refused local port; the store is the real embedded PostgreSQL.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import psycopg
import pytest
import respx
import yaml
from llama_index.core.llms import ChatMessage
from llama_index.core.schema import NodeWithScore, TextNode

from enterprise_rag import EnterpriseRAG
from enterprise_rag.config import RagSettings, load_settings
from enterprise_rag.errors import LLMError, LLMUnavailableError, StoreError
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.providers import Providers
from enterprise_rag.store.embedded import start_embedded, stop_embedded
from enterprise_rag.store.traces import TraceStore
from enterprise_rag.testing import ScriptedLLM, written_for_readers
from tests.conftest import REPO
from tests.support.http import clean_env, completion, no_network  # noqa: F401  (autouse guards)
from tests.support.ingest import assert_consistent
from tests.support.workflow import ALICE, DOCS, FACT, QUESTION, llms, must_not_run, supported_if_stated, write_docs

OPENAI = "https://api.openai.com/v1"
COHERE_RERANK = "https://api.cohere.com/v2/rerank"
GRADE = {
    "type": "object",
    "properties": {"answers": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["answers"],
}


def _providers(tmp_path: Path, **overrides: Any) -> Providers:
    settings: RagSettings = load_settings(None, data_dir=tmp_path / "data", **overrides)
    return Providers(settings, settings.resolved_data_dir())


def _openai(tmp_path: Path, max_retries: int, **role: Any) -> Providers:
    generator = {"provider": "openai", "model": "gpt-4o-mini", "api_key": "sk-test", "max_retries": max_retries,
                 "timeout_s": 2, "max_tokens": 64, **role}  # fmt: skip
    return _providers(tmp_path, llm={"generator": generator})


def _error(status: int) -> httpx.Response:
    # retry-after-ms keeps the SDK's backoff short; the count of attempts is what is tested
    return httpx.Response(status, json={"error": {"message": f"status {status}", "type": "x"}},
                          headers={"retry-after-ms": "1"})  # fmt: skip


FAILURES = {
    "rate-limited 429": lambda request: _error(429),
    "server error 500": lambda request: _error(500),
    "read timeout": httpx.ReadTimeout("timed out"),
}


# --- OpenAI: attempts equal the configured bound --------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("max_retries", [0, 2])
def test_openai_http_attempts_equal_max_retries_plus_one(tmp_path: Path, failure: str, max_retries: int) -> None:
    """Stock llama-index + openai SDK made 6 requests for max_retries=2; now exactly 3."""
    llm = _openai(tmp_path, max_retries).generator
    with respx.mock(assert_all_mocked=True) as router:
        route = router.post(f"{OPENAI}/chat/completions").mock(side_effect=FAILURES[failure])
        with pytest.raises(LLMUnavailableError, match=f"after {max_retries + 1} HTTP attempts"):
            llm.chat([ChatMessage(role="user", content="hi")])
    assert route.call_count == max_retries + 1


@pytest.mark.timeout(60)
def test_openai_completion_and_async_paths_have_the_same_bound(tmp_path: Path) -> None:
    import asyncio

    llm = _openai(tmp_path, 1).generator
    with respx.mock(assert_all_mocked=True) as router:
        route = router.post(f"{OPENAI}/chat/completions").mock(side_effect=lambda request: _error(500))
        with pytest.raises(LLMUnavailableError, match="after 2 HTTP attempts"):
            llm.complete("hi")
        with pytest.raises(LLMUnavailableError, match="after 2 HTTP attempts"):
            asyncio.run(llm.achat([ChatMessage(role="user", content="hi")]))
        with pytest.raises(LLMUnavailableError, match="after 2 HTTP attempts"):
            asyncio.run(llm.acomplete("hi"))
    assert route.call_count == 6  # three calls, two attempts each


@pytest.mark.timeout(60)
def test_openai_transient_failures_within_the_bound_succeed(tmp_path: Path) -> None:
    llm = _openai(tmp_path, 2).generator
    replies = [_error(429), httpx.ReadTimeout("slow"), httpx.Response(200, json=completion("fine"))]
    with respx.mock(assert_all_mocked=True) as router:
        route = router.post(f"{OPENAI}/chat/completions").mock(side_effect=replies)
        assert llm.chat([ChatMessage(role="user", content="hi")]).message.content == "fine"
    assert route.call_count == 3


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.timeout(60)
def test_openai_server_down_is_a_clear_error_after_bounded_retries(tmp_path: Path) -> None:
    """A real refused connection (nothing listens on the port), not a mock."""
    llm = _openai(tmp_path, 1, api_base=f"http://127.0.0.1:{_closed_port()}/v1").generator
    started = time.monotonic()
    with pytest.raises(LLMUnavailableError, match="after 2 HTTP attempts: APIConnectionError") as caught:
        llm.chat([ChatMessage(role="user", content="hi")])
    assert isinstance(caught.value.__cause__, openai.APIConnectionError)
    assert time.monotonic() - started < 20


class _SlowServer(http.server.ThreadingHTTPServer):
    """A real local HTTP server that answers every request only after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.requests = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                server.requests += 1
                self.rfile.read(int(self.headers.get("content-length", 0)))
                time.sleep(server.delay)
                body = json.dumps(completion("too late")).encode()
                try:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up first

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.mark.timeout(60)
def test_openai_slow_server_is_abandoned_at_the_configured_timeout(tmp_path: Path) -> None:
    """A real slow server (not a mocked timeout): each attempt is cut at timeout_s, attempts are bounded."""
    server = _SlowServer(delay=5.0)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        llm = _openai(tmp_path, 1, api_base=url, timeout_s=0.5).generator
        started = time.monotonic()
        with pytest.raises(LLMUnavailableError, match="after 2 HTTP attempts: APITimeoutError"):
            llm.chat([ChatMessage(role="user", content="hi")])
        elapsed = time.monotonic() - started
    finally:
        server.shutdown()
    assert server.requests == 2
    assert elapsed < 4.5  # two 0.5 s attempts plus the SDK's backoff, never the server's 5 s


@pytest.mark.timeout(60)
def test_workflow_caller_does_not_multiply_the_sdk_retries(tmp_path: Path) -> None:
    """The workflow's own retry loop (llm_max_retries) must not re-run what the SDK already retried."""
    llm = _openai(tmp_path, 1).generator
    caller = LLMCaller({"generator": llm}, None, timeout_s=10, max_retries=3, backoff_s=0.01)
    with respx.mock(assert_all_mocked=True) as router:
        route = router.post(f"{OPENAI}/chat/completions").mock(side_effect=lambda request: _error(500))
        with pytest.raises(LLMError, match="'grade' failed"):
            caller.call("generator", "grade", [ChatMessage(role="user", content="q")], max_tokens=8, schema=GRADE)
    assert route.call_count == 2  # 1 + max_retries=1 of the SDK; not (1 + 3) * 2
    assert caller.stats.failures == 1 and caller.stats.calls == 0


@pytest.mark.timeout(60)
def test_malformed_json_from_openai_is_retried_by_the_workflow_then_fails(tmp_path: Path) -> None:
    llm = _openai(tmp_path, 2).generator
    caller = LLMCaller({"generator": llm}, None, timeout_s=10, max_retries=2, backoff_s=0.01)
    bad = [httpx.Response(200, json=completion('{"answers": "yes"')),  # truncated
           httpx.Response(200, json=completion('{"answers": "maybe"}')),  # outside the enum
           httpx.Response(200, json=completion("Sure! Here is the JSON you asked for."))]  # fmt: skip
    with respx.mock(assert_all_mocked=True) as router:
        route = router.post(f"{OPENAI}/chat/completions").mock(side_effect=bad)
        with pytest.raises(LLMError, match="failed after 3 attempts: malformed JSON"):
            caller.call("generator", "grade", [ChatMessage(role="user", content="q")], max_tokens=8, schema=GRADE)
    assert route.call_count == 3
    body = json.loads(route.calls.last.request.content)
    assert body["response_format"]["json_schema"]["schema"] == GRADE


@pytest.mark.timeout(60)
def test_malformed_json_then_valid_is_accepted(tmp_path: Path) -> None:
    llm = _openai(tmp_path, 0).generator
    caller = LLMCaller({"generator": llm}, None, timeout_s=10, max_retries=2, backoff_s=0.01)
    replies = [
        httpx.Response(200, json=completion("not json")),
        httpx.Response(200, json=completion('{"answers": "no"}')),
    ]
    with respx.mock(assert_all_mocked=True) as router:
        router.post(f"{OPENAI}/chat/completions").mock(side_effect=replies)
        got = caller.call("generator", "grade", [ChatMessage(role="user", content="q")], max_tokens=8, schema=GRADE)
    assert got == {"answers": "no"} and caller.stats.failures == 1 and caller.stats.calls == 1


@pytest.mark.timeout(60)
def test_a_truncated_reply_is_retried_with_a_doubled_token_budget(tmp_path: Path) -> None:
    """Unparsable JSON under a schema means the budget cut the reply off; repeating the same budget would too."""
    llm = _openai(tmp_path, 0).generator
    caller = LLMCaller({"generator": llm}, None, timeout_s=10, max_retries=2, backoff_s=0.01)
    replies = [
        httpx.Response(200, json=completion('{"answers": "y')),  # cut off
        httpx.Response(200, json=completion('{"answers": "maybe"}')),  # parses, but off the schema
        httpx.Response(200, json=completion('{"answers": "yes"}')),
    ]
    with respx.mock(assert_all_mocked=True) as router:
        route = router.post(f"{OPENAI}/chat/completions").mock(side_effect=replies)
        got = caller.call("generator", "grade", [ChatMessage(role="user", content="q")], max_tokens=8, schema=GRADE)
    bodies = [json.loads(c.request.content) for c in route.calls]
    budgets = [b.get("max_completion_tokens") or b.get("max_tokens") for b in bodies]
    assert got == {"answers": "yes"} and budgets == [8, 16, 16]


# --- Cohere rerank: a request timeout from config, bounded retries --------------------------------
def _nodes() -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(text=f"passage {i}", id_=f"n{i}"), score=1.0) for i in range(3)]


def _cohere(tmp_path: Path, timeout_s: float = 7.5) -> Any:
    return _providers(tmp_path, reranker={"provider": "cohere", "api_key": "co-test", "timeout_s": timeout_s}).reranker


def test_cohere_requests_carry_the_configured_timeout(tmp_path: Path) -> None:
    reranker = _cohere(tmp_path, timeout_s=7.5)
    answer = {"id": "r1", "results": [{"index": 1, "relevance_score": 0.9}], "meta": {}}
    with respx.mock(assert_all_mocked=True) as router:
        route = router.post(COHERE_RERANK).mock(return_value=httpx.Response(200, json=answer))
        out = reranker.postprocess_nodes(_nodes(), query_str="q")
    assert [n.node.node_id for n in out] == ["n1"]
    assert route.calls.last.request.extensions["timeout"] == {"connect": 7.5, "read": 7.5, "write": 7.5, "pool": 7.5}


@pytest.mark.timeout(60)
def test_cohere_timeout_fails_fast_without_retry_loops(tmp_path: Path) -> None:
    reranker = _cohere(tmp_path)
    with respx.mock(assert_all_mocked=True) as router:
        route = router.post(COHERE_RERANK).mock(side_effect=httpx.ReadTimeout("timed out"))
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            reranker.postprocess_nodes(_nodes(), query_str="q")
    assert route.call_count == 1 and time.monotonic() - started < 5


@pytest.mark.timeout(60)
def test_cohere_500_is_retried_by_the_sdk_only(tmp_path: Path) -> None:
    """Stock CohereRerank: 10 tenacity attempts 4-10 s apart, each retried 2x by the SDK (30 requests)."""
    import cohere

    reranker = _cohere(tmp_path)
    with respx.mock(assert_all_mocked=True) as router:
        route = router.post(COHERE_RERANK).mock(return_value=httpx.Response(500, json={"message": "boom"}))
        started = time.monotonic()
        with pytest.raises(cohere.InternalServerError):
            reranker.postprocess_nodes(_nodes(), query_str="q")
    assert route.call_count == 3 and time.monotonic() - started < 15


# --- the database restarted mid-query and mid-ingest (a dedicated embedded server) ---------------
DOC_COUNT = 6


def _versioned_docs(folder: Path, version: int, names: list[str] | None = None) -> Path:
    """DOC_COUNT documents whose every section says which version it belongs to."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(DOC_COUNT):
        if names is not None and f"doc{i}.md" not in names:
            continue
        front = yaml.safe_dump({"title": f"Document {i}", "version": f"v{version}", "allowed_groups": ["staff"]})
        sections = "\n\n".join(
            f"## Part {j}\n\nDocument {i} part {j} states rule {i}{j} of edition v{version}. " * 3 for j in range(4)
        )
        (folder / f"doc{i}.md").write_text(f"---\n{front}---\n\n# Document {i}\n\n{sections}\n")
    return folder


def _store_versions(dsn: str) -> dict[str, str]:
    """Document file name -> its version; asserts each document's nodes all belong to that version."""
    with psycopg.connect(dsn) as conn:
        docs = conn.execute("SELECT document_id, source, version FROM rag_documents").fetchall()
        out = {}
        for doc_id, source, version in docs:
            texts = [r[0] for r in conn.execute("SELECT text FROM rag_nodes WHERE document_id = %s", (doc_id,))]
            editions = {word for t in texts for word in ("v1", "v2") if f"edition {word}" in t}
            assert editions == {version}, f"{source}: document row {version}, nodes {editions}: half a version"
            out[Path(source).name] = version
    return out


def _wait_for(predicate: Any, timeout: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _blocked_writer(dsn: str) -> Any:
    """The pid of a backend blocked on a lock inside the document write, if any."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE 'INSERT INTO rag_documents%%' AND datname = current_database()"
        ).fetchone()
    return row[0] if row else None


@pytest.fixture
def own_server() -> Iterator[Path]:
    """A dedicated embedded server (its own data dir), so restarting it disturbs no other test."""
    data_dir = Path(tempfile.mkdtemp(prefix="erag-faults-", dir="/tmp"))
    yield data_dir
    stop_embedded(data_dir)
    shutil.rmtree(data_dir, ignore_errors=True)


def _restart(data_dir: Path) -> None:
    assert stop_embedded(data_dir)
    start_embedded(data_dir, shared_buffers_mb=0)


def _embedded_rag(data_dir: Path, embed_model: Any, **kwargs: Any) -> EnterpriseRAG:
    settings = load_settings(
        None, data_dir=data_dir,
        database={"embedded_shared_buffers_mb": 0, "pool_min_size": 2, "connect_timeout_s": 5},
        workflow={"llm_backoff_s": 0.01, "llm_timeout_s": 10.0}, ingest={"write_batch_size": 1},
    )  # fmt: skip
    return EnterpriseRAG(settings=settings, embed_model=embed_model, **kwargs)


@pytest.mark.timeout(240)
def test_restart_mid_query_the_query_still_completes_and_later_ones_work(
    own_server: Path, tmp_path: Path, embed_model: Any
) -> None:
    restarts = []

    def grade_then_restart(messages: list[Any], kwargs: dict[str, Any]) -> Any:
        if not restarts:  # the server goes away while the query is between its database steps
            _restart(own_server)
            restarts.append(1)
        from tests.support.workflow import grade_yes_if

        return grade_yes_if(FACT)(messages, kwargs)

    generator, grader = llms(grade=grade_then_restart)
    with _embedded_rag(own_server, embed_model, generator=generator, grader=grader) as rag:
        assert not rag.ingest(write_docs(tmp_path / "docs", DOCS), allowed_groups=["all-staff"]).failed
        before = [n.node.node_id for n in rag.retrieve(QUESTION, user=ALICE)]
        res = rag.query(QUESTION, user=ALICE)  # the pool held connections the restart killed
        assert restarts and FACT in res.answer and res.citations
        trace = rag.trace(res.trace_id, ALICE)
        assert trace is not None and trace["status"] == "done"
        assert [n.node.node_id for n in rag.retrieve(QUESTION, user=ALICE)] == before
        _restart(own_server)
        assert [n.node.node_id for n in rag.retrieve(QUESTION, user=ALICE)] == before


@pytest.mark.timeout(240)
def test_query_in_flight_when_the_server_stops_fails_clearly_then_the_next_works(
    own_server: Path, tmp_path: Path, embed_model: Any
) -> None:
    with _embedded_rag(own_server, embed_model) as rag:
        assert not rag.ingest(write_docs(tmp_path / "docs", DOCS), allowed_groups=["all-staff"]).failed
        before = [n.node.node_id for n in rag.retrieve(QUESTION, user=ALICE)]
        dsn = rag.db.dsn()
        blocker = psycopg.connect(dsn)
        blocker.execute("LOCK TABLE rag_nodes IN ACCESS EXCLUSIVE MODE")  # the next search waits inside the server
        worker, outcome = _in_background(lambda: rag.retrieve(QUESTION, user=ALICE))
        _wait_for(lambda: _waiting_on_lock(dsn), what="the search to wait on the lock")
        _restart(own_server)
        worker.join(60)
        blocker.close()
        assert len(outcome) == 1 and isinstance(outcome[0], StoreError), outcome
        assert "database error" in str(outcome[0])
        assert [n.node.node_id for n in rag.retrieve(QUESTION, user=ALICE)] == before


def _in_background(call: Callable[[], object]) -> tuple[threading.Thread, list[BaseException | None]]:
    """Start ``call`` in a thread; the list receives None, or the exception it raised."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    return worker, outcome


def _waiting_on_lock(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()
    return bool(row and row[0])


@pytest.mark.timeout(300)
def test_restart_mid_ingest_leaves_whole_documents_and_a_rerun_completes(
    own_server: Path, tmp_path: Path, embed_model: Any
) -> None:
    folder = _versioned_docs(tmp_path / "docs", 1)
    with _embedded_rag(own_server, embed_model) as rag:
        assert len(rag.ingest(folder).added) == DOC_COUNT
        dsn = rag.db.dsn()
        _versioned_docs(folder, 2)
        held: list[psycopg.Connection] = []

        def lock_after_first_batch(source: str, outcome: str) -> None:
            if not held:  # the next batch then blocks inside its write transaction
                conn = psycopg.connect(dsn)
                conn.execute("LOCK TABLE rag_documents IN EXCLUSIVE MODE")
                held.append(conn)

        worker, outcome = _in_background(lambda: rag.ingest(folder, progress=lock_after_first_batch))
        _wait_for(lambda: _blocked_writer(dsn), what="the second batch to block in its write")
        _restart(own_server)
        worker.join(60)
        assert len(outcome) == 1 and isinstance(outcome[0], StoreError), outcome

        versions = _store_versions(dsn)  # every document whole: old or new, never half
        assert sorted(versions) == [f"doc{i}.md" for i in range(DOC_COUNT)]
        assert list(versions.values()).count("v2") == 1  # exactly the batch that committed
        assert_consistent(dsn)

        report = rag.ingest(folder)  # the rerun finishes the job
        assert len(report.unchanged) == 1 and len(report.updated) == DOC_COUNT - 1 and not report.failed
        assert set(_store_versions(dsn).values()) == {"v2"}
        assert_consistent(dsn)


# --- the process killed mid-ingest and mid-query (SIGKILL of a child process) ---------------------
def _child(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "tests.support.fault_scripts", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def _kill(child: subprocess.Popen[bytes]) -> None:
    os.kill(child.pid, signal.SIGKILL)
    child.wait(30)
    assert child.returncode == -signal.SIGKILL


def _no_backend_left(dsn: str, pid: int) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() == (0,)


@pytest.mark.timeout(300)
def test_sigkill_mid_ingest_leaves_no_half_document_and_a_rerun_completes(
    rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path
) -> None:
    folder = _versioned_docs(tmp_path / "docs", 1, names=["doc0.md", "doc1.md", "doc2.md"])
    assert len(rag.ingest(folder).added) == 3
    _versioned_docs(folder, 2)  # three documents change, three are new

    child = _child("ingest", fresh_dsn, str(folder))
    try:
        writer = _wait_for(lambda: _blocked_writer(fresh_dsn) or child.poll() is not None, what="a blocked write")
        assert child.poll() is None, child.stdout.read().decode() if child.stdout else ""
    finally:
        _kill(child)
    _wait_for(lambda: _no_backend_left(fresh_dsn, writer), what="the killed client's backend to end")

    versions = _store_versions(fresh_dsn)
    assert sorted(versions.items()) == [("doc0.md", "v2"), ("doc1.md", "v1"), ("doc2.md", "v1")]
    assert_consistent(fresh_dsn)

    report = rag.ingest(folder)
    assert (len(report.unchanged), len(report.updated), len(report.added)) == (1, 2, 3) and not report.failed
    assert _store_versions(fresh_dsn) == {f"doc{i}.md": "v2" for i in range(DOC_COUNT)}
    assert_consistent(fresh_dsn)
    with psycopg.connect(fresh_dsn) as conn:
        count = conn.execute("SELECT count(*), count(DISTINCT source) FROM rag_documents").fetchone()
    assert count == (DOC_COUNT, DOC_COUNT)


@pytest.mark.timeout(300)
def test_sigkill_mid_query_resumes_from_the_trace_without_repeating_llm_calls(
    fresh_dsn: str, tmp_path: Path, embed_model: Any
) -> None:
    settings = load_settings(None, database={"dsn": fresh_dsn}, workflow={"llm_backoff_s": 0.01})
    with EnterpriseRAG(data_dir=tmp_path / "data", settings=settings, embed_model=embed_model) as rag:
        assert not rag.ingest(write_docs(tmp_path / "docs", DOCS), allowed_groups=["all-staff"]).failed

    marker = tmp_path / "in-check"
    child = _child("query", fresh_dsn, str(marker))
    try:
        _wait_for(lambda: marker.exists() or child.poll() is not None, timeout=120, what="the child to reach check")
        assert child.poll() is None, child.stdout.read().decode() if child.stdout else ""
    finally:
        _kill(child)

    generator2 = ScriptedLLM(
        {
            "generate": must_not_run("generate"),
            "revise": must_not_run("revise"),
        }
    )
    grader2 = ScriptedLLM(
        {"grade": must_not_run("grade"), "rewrite": must_not_run("rewrite"), "support": supported_if_stated,
         "addressee": written_for_readers}
    )
    with EnterpriseRAG(data_dir=tmp_path / "data", settings=settings, embed_model=embed_model,
                       generator=generator2, grader=grader2) as rag:  # fmt: skip
        (recent,) = TraceStore(rag.db).recent(ALICE)
        killed = rag.trace(recent["trace_id"], ALICE)
        assert killed is not None and killed["status"] == "running"  # nobody could mark it failed
        graded = sum(1 for c in killed["llm_calls"] if c["name"] == "grade")  # one per passage above the floor
        names = [c["name"] for c in killed["llm_calls"]]
        assert graded >= 1 and names == ["grade"] * graded + ["addressee"] * 2 + ["generate"]
        res = rag.resume(recent["trace_id"], ALICE)
        assert FACT in res.answer and res.citations and res.pipeline["flagged_for_review"] is False
        assert [name for name, _ in grader2.calls] == ["support"] and generator2.calls == []
        done = rag.trace(recent["trace_id"], ALICE)
        assert done is not None and done["status"] == "done"
        expected = ["grade"] * graded + ["addressee"] * 2 + ["generate", "support"]
        assert [c["name"] for c in done["llm_calls"]] == expected


# --- the data dir's file system full mid-ingest --------------------------------------------------
@pytest.fixture
def small_disk() -> Iterator[Path]:
    """An empty 512 MiB tmpfs to hold an embedded server's data dir (needs the right to mount)."""
    mount = Path(tempfile.mkdtemp(prefix="erag-full-", dir="/tmp"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        mount.rmdir()
        pytest.skip(f"cannot mount a small file system here: {done.stderr.decode().strip()}")
    yield mount
    stop_embedded(mount / "data")
    subprocess.run(["umount", "-l", str(mount)], check=False)
    mount.rmdir()


def _fill(mount: Path, leave_bytes: int) -> Path:
    """A ballast file taking all the free space of ``mount`` but ``leave_bytes``."""
    stat = os.statvfs(mount)
    ballast = mount / "ballast"
    with open(ballast, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, max(stat.f_bavail * stat.f_frsize - leave_bytes, 1))
    return ballast


@pytest.mark.timeout(300)
def test_disk_full_mid_ingest_loses_nothing_and_a_rerun_completes(small_disk: Path, embed_model: Any) -> None:
    """The data dir's file system fills up during an ingest: what committed is whole, the rest fails with
    the reason, nothing half-written remains; with space back (and the server restarted if it had to
    stop), the rerun ingests everything."""
    folder = _versioned_docs(small_disk / "docs-src", 1, names=["doc0.md", "doc1.md"])
    with _embedded_rag(small_disk / "data", embed_model) as rag:
        assert len(rag.ingest(folder).added) == 2
        dsn = rag.db.dsn()
        _versioned_docs(folder, 2)  # two documents change, four are new
        for i in range(DOC_COUNT, DOC_COUNT + 40):  # and forty more, to need more than the space left
            body = f"Document {i} part states rule {i} of edition v2. " * 400
            front = f"---\ntitle: Extra {i}\nversion: v2\nallowed_groups: [staff]\n---\n\n"
            (folder / f"extra{i}.md").write_text(f"{front}{body}\n")
        ballast = _fill(small_disk, leave_bytes=512 * 1024)
        try:
            report = rag.ingest(folder)
            failed = [f.reason for f in report.failed]
        except StoreError as exc:  # the server itself had to stop (it cannot write its log)
            failed = [str(exc)]
        server_up = _server_answers(dsn)  # a full WAL stops the server (PANIC); a full table only fails the write
        assert failed and (not server_up or all("No space left on device" in reason for reason in failed)), failed
        ballast.unlink()
        if not server_up:
            start_embedded(small_disk / "data", shared_buffers_mb=0)
        versions = _store_versions(dsn)  # every document whole, old or new
        assert {versions[f"doc{i}.md"] for i in range(2)} <= {"v1", "v2"}
        assert_consistent(dsn)
        report = rag.ingest(folder)
        assert not report.failed
        assert set(_store_versions(dsn).values()) == {"v2"} and len(_store_versions(dsn)) == DOC_COUNT + 40
        assert_consistent(dsn)


def _server_answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False
