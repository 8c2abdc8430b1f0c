"""The permission leak harness, bounded for the default test run (benchmarks/leakage.py runs thousands).

A generated corpus (documents each with their own ACL of hostile group and user names and
a unique marker token) is ingested once through the public API, with the real local
embedding model, the real embedded PostgreSQL and echoing scripted LLMs. Generated
principals and questions (hostile alphabets, near misses of real names, very long and
empty strings) probe every path; the oracle is computed in Python from the ACLs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enterprise_rag import EnterpriseRAG, PermissionDeniedError, Principal
from enterprise_rag.store.traces import TraceStore
from tests.security import harness
from tests.security.harness import LeakCorpus
from tests.support.databases import create_db, drop_db


def probes(n: int) -> settings:
    """Hypothesis settings for ``n`` probes (no shrinking database; module fixtures are shared on purpose)."""
    return settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))


DOCS = harness.make_docs(n_docs=30, n_groups=28, n_users=14, seed=7)


@pytest.fixture(scope="module")
def corpus(server_dsn: str, tmp_path_factory: pytest.TempPathFactory, embed_model) -> Iterator[LeakCorpus]:  # type: ignore[no-untyped-def]
    name = f"leak_corpus_{os.getpid()}"
    dsn = create_db(server_dsn, name)
    found = harness.ingest_corpus(dsn, tmp_path_factory.mktemp("leak") / "data", DOCS, embed_model)
    yield found
    found.rag.close()
    drop_db(server_dsn, name)


def test_the_corpus_and_oracle_are_what_the_probes_assume(corpus: LeakCorpus) -> None:
    assert len(corpus.key_of) == len(DOCS) and set(corpus.key_of.values()) == set(corpus.docs)
    with corpus.rag.db.connection() as conn:  # the stored ACLs are exactly the generated ones
        rows = conn.execute("SELECT document_id, allowed_groups, allowed_users FROM rag_documents").fetchall()
        for doc_id, groups, users in rows:
            doc = corpus.docs[corpus.key_of[doc_id]]
            assert sorted(groups) == sorted(doc.groups) and sorted(users) == sorted(doc.users)
    # every document is readable by someone, and the real names split the corpus
    for doc in DOCS:
        readers = [Principal("x", [g]) for g in doc.groups] + [Principal(u) for u in doc.users]
        assert any(doc.key in corpus.visible(p) for p in readers)
    assert 0 < len(corpus.visible(Principal("alice", ["all-staff"]))) < len(DOCS)
    # the harness sees a leak when there is one: a node of a forbidden document is counted
    outsider = Principal("nobody", ["no-such-group"])
    staff_nodes = corpus.rag.retrieve(corpus.question_all, user=Principal("s", ["all-staff"]), top_k=5)
    assert staff_nodes and corpus.leaked_nodes(outsider, staff_nodes) == len(staff_nodes)


RETRIEVAL_PATHS = {
    "retrieve k=1": harness.check_retrieve(1),
    "retrieve k=5": harness.check_retrieve(5),
    "retrieve k=50": harness.check_retrieve(50),
    "retrieve with history": harness.check_history,
    "as_retriever (sync+async)": harness.check_as_retriever,
    "rerank input": harness.check_rerank_input,
    "parents and section windows": harness.check_parents_and_windows,
}


@probes(30)
@given(data=st.data())
def test_generated_probes_leak_nothing_on_any_retrieval_path(corpus: LeakCorpus, data: st.DataObject) -> None:
    p = data.draw(harness.principals(corpus), label="principal")
    q = data.draw(harness.questions(corpus), label="question")
    leaks = {path: check(corpus, p, q) for path, check in RETRIEVAL_PATHS.items()}
    assert not any(leaks.values()), leaks


def test_readers_do_get_their_documents_on_every_path(corpus: LeakCorpus) -> None:
    """The control for the probes: a reader with real groups gets passages on each path (nothing is just empty)."""
    p = Principal("alice", ["all-staff", *DOCS[1].groups, *DOCS[2].groups])
    assert corpus.visible(p)
    nodes = corpus.rag.retrieve(corpus.question_all, user=p, top_k=50)
    assert {corpus.key_of[n.node.metadata["document_id"]] for n in nodes} == corpus.visible(p)
    res = corpus.rag.query(corpus.question_all, user=p)
    assert res.citations and {corpus.key_of[c.document_id] for c in res.citations} <= corpus.visible(p)


@probes(12)
@given(data=st.data())
def test_generated_probes_leak_nothing_through_query_or_traces(corpus: LeakCorpus, data: st.DataObject) -> None:
    p = data.draw(harness.principals(corpus), label="principal")
    q = data.draw(harness.questions(corpus), label="question")
    other = data.draw(harness.principals(corpus), label="other user")
    probe = harness.run_query(corpus, p, q)
    assert probe.leaked == 0
    assert probe.trace_id or "\x00" in p.user_id  # refused only for a user id PostgreSQL cannot store
    if probe.trace_id:
        assert corpus.rag.trace(probe.trace_id, p) is not None  # the owner reads it
    assert harness.check_trace(corpus, p, probe.trace_id, other) == 0


@pytest.fixture(scope="module")
def web(corpus: LeakCorpus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EnterpriseRAG, set[str]]]:
    egress = [corpus.groups[1], corpus.groups[5]]
    rag = harness.web_rag(corpus, tmp_path_factory.mktemp("web") / "data", egress)
    yield rag, set(egress)
    rag.close()


@probes(15)
@given(data=st.data())
def test_a_principal_outside_the_egress_groups_never_triggers_web_search(
    corpus: LeakCorpus, web: tuple[EnterpriseRAG, set[str]], data: st.DataObject
) -> None:
    rag, egress = web
    p = data.draw(harness.principals(corpus), label="principal")
    q = data.draw(harness.questions(corpus), label="question")
    with harness.recorded_tavily() as calls:
        leaked, _ = harness.check_web_gate(rag, calls, p, q, egress)
    assert leaked == 0, calls


def test_a_principal_in_an_egress_group_does_reach_the_web(
    corpus: LeakCorpus, web: tuple[EnterpriseRAG, set[str]]
) -> None:
    """The control: the gate is a gate, not a wall that nobody passes."""
    rag, egress = web
    with harness.recorded_tavily() as calls:
        leaked, sent = harness.check_web_gate(rag, calls, Principal("w", [sorted(egress)[0]]), "leave policy", egress)
        assert sent and leaked == 0 and calls == ["https://api.tavily.com/search"]
        leaked, sent = harness.check_web_gate(rag, calls, Principal("w", ["all-staff"]), "leave policy", egress)
        assert not sent and leaked == 0
        leaked, sent = harness.check_web_gate(rag, calls, Principal("w\x00", [sorted(egress)[0]]), "leave", egress)
        assert not sent and leaked == 0  # refused before any search


def test_readers_never_see_a_version_under_an_acl_they_do_not_hold_during_reingest_races(
    corpus: LeakCorpus, tmp_path: Path
) -> None:
    out = harness.run_race(corpus, tmp_path / "race", cycles=9, readers=1)
    assert not out.errors, out.errors
    assert out.leaked == 0, out
    assert out.writes >= 12 and out.reads >= 9
    # each reader saw its own version at some point (the race really ran over both versions)
    assert out.seen.get("a saw a", 0) and out.seen.get("b saw b", 0), out.seen
    assert not out.seen.get("none saw a") and not out.seen.get("none saw b")


def test_query_with_names_and_questions_postgres_cannot_store(corpus: LeakCorpus) -> None:
    """NUL bytes and unpaired surrogates: the question is cleaned, unstorable groups match nothing,
    and a user id that cannot own a trace is refused with a clear error (not a driver error)."""
    staff = Principal("sam", ["all-staff", "eng\x00", "\udfff"])
    probe = harness.run_query(corpus, staff, "policy\x00procedure \ud800 handbook")
    assert probe.leaked == 0 and probe.trace_id
    trace = corpus.rag.trace(probe.trace_id, staff)
    assert trace is not None and trace["groups"] == ["all-staff"] and "\x00" not in trace["question"]
    for user_id in ("sam\x00", "\ud800"):
        with pytest.raises(PermissionDeniedError, match="cannot own a trace"):
            corpus.rag.query("policy", user=Principal(user_id, ["all-staff"]))
        assert corpus.rag.trace(probe.trace_id, Principal(user_id)) is None  # and reads no one's trace
        assert TraceStore(corpus.rag.db).recent(Principal(user_id)) == []
