"""``rag.as_query_engine(user=...)``: a LlamaIndex query engine over the real workflow and store.

The store, parsers and embedding model are real; only the two LLM roles are
:class:`ScriptedLLM` fakes whose replies are built from the prompt they get,
so what is cited follows from what the user was allowed to retrieve.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import Response

from enterprise_rag import EnterpriseRAG, PermissionDeniedError, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.llm import prompts
from enterprise_rag.testing import ScriptedLLM, written_for_readers, yes_probability
from tests.support.workflow import reply, supported_if_stated

DOCS = {
    "vacation.md": ("all-staff", "# Vacation policy\n\nEvery employee receives 27 days of paid vacation per year.\n"),
    "salaries.md": ("hr", "# Salary bands\n\nThe salary band for a senior engineer tops out at 98,000 euros.\n"),
    "bonus.md": ("hr", "# Bonus plan\n\nThe yearly bonus pool is 4 percent of payroll, paid in March.\n"),
}
STAFF = Principal(user_id="sam", groups=["all-staff"])
HR = Principal(user_id="hana", groups=["hr", "all-staff"])


def grade_everything_yes(messages: list[Any], kwargs: dict[str, Any]) -> Any:
    """Every passage answers: whatever the user may see gets used."""
    return yes_probability(1.0)


def cite_every_source(messages: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """One sentence per listed line that states something, copied from it: the answer uses all it was given."""
    lines = prompts.listed_lines(messages)
    return reply(lines, {n: text.strip() for n, text in lines.items() if not text.lstrip().startswith("#")})


@pytest.fixture
def rag(fresh_dsn: str, tmp_path: Path, embed_model: Any) -> Iterator[EnterpriseRAG]:
    folder = tmp_path / "docs"
    folder.mkdir()
    settings = load_settings(
        None, database={"dsn": fresh_dsn}, workflow={"llm_backoff_s": 0.01, "llm_timeout_s": 5.0, "grade_floor": {}}
    )
    instance = EnterpriseRAG(
        data_dir=tmp_path / "data",
        settings=settings,
        embed_model=embed_model,
        generator=ScriptedLLM({"generate": cite_every_source, "revise": cite_every_source}),
        grader=ScriptedLLM(
            {"grade": grade_everything_yes, "support": supported_if_stated, "rewrite": "company policies",
             "addressee": written_for_readers}
        ),
    )
    for name, (group, text) in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
        report = instance.ingest(folder / name, allowed_groups=[group])
        assert not report.failed, report.failed
    yield instance
    instance.close()


def visible_documents(rag: EnterpriseRAG, user: Principal) -> set[str]:
    with rag.db.connection() as conn:
        rows = conn.execute(
            "SELECT document_id FROM rag_documents WHERE allowed_users && %s OR allowed_groups && %s",
            (user.users, list(user.groups)),
        ).fetchall()
    return {r[0] for r in rows}


QUESTION = "What do the salary bands, the bonus plan and the vacation policy say?"


def test_is_a_llamaindex_query_engine_returning_cited_nodes_and_the_payload(rag: EnterpriseRAG) -> None:
    engine = rag.as_query_engine(user=HR)
    assert isinstance(engine, BaseQueryEngine)

    response = engine.query(QUESTION)

    assert isinstance(response, Response)
    assert response.response and "[S1]" in response.response
    payload = response.metadata
    assert payload is not None
    assert set(payload) == {"answer", "citations", "evaluation", "pipeline", "trace_id"}
    assert payload["answer"] == response.response and payload["trace_id"]
    assert payload["pipeline"]["decision"] == "proceed"
    cited = [c["label"] for c in payload["citations"]]
    assert [n.node.metadata["label"] for n in response.source_nodes] == cited
    for node, citation in zip(response.source_nodes, payload["citations"], strict=True):
        meta = node.node.metadata
        assert (meta["source"], meta["document_id"], meta["page"]) == (
            citation["source"], citation["document_id"], citation["page"],
        )  # fmt: skip
        assert meta["kind"] == "corpus"
        assert citation["quote"] in node.node.get_content()  # the node is the text that was cited
    # The HR user may read all three documents, and this answer cites each of them.
    assert {Path(n.node.metadata["source"]).name for n in response.source_nodes} == set(DOCS)
    # Corpus source nodes keep the id of the stored chunk they came from.
    with rag.db.connection() as conn:
        stored = {r[0] for r in conn.execute("SELECT node_id FROM rag_nodes")}
    assert {n.node.node_id for n in response.source_nodes} <= stored
    assert rag.trace(payload["trace_id"], HR) is not None


def test_never_returns_a_node_outside_the_principals_acl(rag: EnterpriseRAG) -> None:
    allowed = visible_documents(rag, STAFF)
    assert len(allowed) == 1  # only the vacation policy

    response = rag.as_query_engine(user=STAFF).query(QUESTION)

    assert response.source_nodes, "the visible document should still be cited"
    assert {n.node.metadata["document_id"] for n in response.source_nodes} <= allowed
    assert "98,000" not in str(response) and "4 percent" not in str(response)
    retrieved = rag.as_query_engine(user=STAFF).retrieve(QUESTION)  # type: ignore[arg-type]
    assert retrieved and {n.node.metadata["document_id"] for n in retrieved} <= allowed

    nobody = Principal(user_id="ghost", groups=["contractors"])
    empty = rag.as_query_engine(user=nobody).query(QUESTION)
    assert empty.source_nodes == []
    assert empty.metadata is not None and empty.metadata["citations"] == []


def test_async_query_runs_the_same_workflow(rag: EnterpriseRAG) -> None:
    engine = rag.as_query_engine(user=STAFF)
    response = asyncio.run(engine.aquery("How many vacation days do employees get?"))
    assert isinstance(response, Response)
    assert "27 days" in str(response)
    assert [Path(n.node.metadata["source"]).name for n in response.source_nodes] == ["vacation.md"]


def test_follow_up_history_is_passed_to_the_workflow(rag: EnterpriseRAG) -> None:
    grader = rag.providers.grader
    assert isinstance(grader, ScriptedLLM)
    grader._handlers["standalone"] = "How many days of paid vacation does an employee get per year?"
    history = [{"role": "user", "content": "Tell me about vacation."}, {"role": "assistant", "content": "Sure."}]
    response = rag.as_query_engine(user=STAFF, history=history).query("And how many days?")
    assert grader.count("standalone") == 1
    assert response.metadata is not None
    trace = rag.trace(response.metadata["trace_id"], STAFF)
    assert trace is not None and trace["history"] == history


def test_no_principal_is_an_error(rag: EnterpriseRAG) -> None:
    with pytest.raises(PermissionDeniedError):
        rag.as_query_engine(user=None)  # type: ignore[arg-type]
    with pytest.raises(PermissionDeniedError):
        rag.as_query_engine(user="hana")  # type: ignore[arg-type]
