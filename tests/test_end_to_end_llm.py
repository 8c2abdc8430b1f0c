"""End to end with the real local LLM: one grounded answer and one out-of-corpus question.

Slow (tens of seconds each on 2 cores); the whole scenario answer suite lives in
tests/acceptance/test_scenarios_answers.py (marker ``answers``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.llm import prompts
from tests.conftest import SCENARIOS
from tests.support.databases import create_db
from tests.support.scenario_matching import contains, is_not_found

pytestmark = pytest.mark.slow
DANA = Principal("dana", ["all-staff"])


@pytest.fixture(scope="module")
def local_rag(server_dsn: str, embed_model: Any, model_data_dir: Path) -> Iterator[EnterpriseRAG]:

    name = "end_to_end_llm"
    dsn = create_db(server_dsn, name)
    rag = EnterpriseRAG(data_dir=model_data_dir, settings=load_settings(None, database={"dsn": dsn}),
                        embed_model=embed_model)  # fmt: skip
    for path, groups in (("docs/compliance/kyc.md", ["all-staff"]), ("docs/hr/expenses.md", ["all-staff"])):
        assert not rag.ingest([SCENARIOS / path], allowed_groups=groups).failed
    yield rag
    rag.close()


def test_grounded_answer_is_cited_and_checked(local_rag: EnterpriseRAG) -> None:
    res = local_rag.query("What does a new account holder have to submit for KYC, and how long do they have?", DANA)
    assert contains(res.answer, ["30 days", "30-day", "thirty days"]), res.answer
    assert any(c.source.endswith("kyc.md") for c in res.citations), res.citations
    assert res.pipeline["llm_calls"] >= 3 and res.evaluation["support"]["label"] != "unknown"
    trace = local_rag.trace(res.trace_id, DANA)
    assert trace is not None and {s["step"] for s in trace["steps"]} >= {"retrieve", "grade", "generate", "verify"}
    # Grading, generation and the judge start with one prefix (rules and sources); the screen between them reads
    # one paragraph alone. The server's own counters say that each call after the first read the prefix from the
    # prompt cache, the calls after the screen's included.
    calls = trace["llm_calls"]
    generate = [c for c in calls if c["name"] == "generate"][-1]
    shared = [c for c in calls if c["messages"][0] == generate["messages"][0]]
    names = [c["name"] for c in shared]
    assert names[0] == "grade" and "generate" in names, names
    assert set(names) <= {"grade", "generate", "revise", "support"}, names
    screened = [c for c in calls if c["name"] == "addressee"]
    assert screened and calls.index(screened[-1]) < calls.index(generate)
    prefix = shared[0]["prompt_tokens"] - 60  # the first call's prompt less its short task
    assert prefix > len(prompts.answer_system([]).content or "") // 8  # the sources are in it
    reused = [(c["name"], c["cached_tokens"]) for c in shared]
    assert all(tokens >= 0.9 * prefix for _, tokens in reused[1:]), (prefix, reused)
    assert res.pipeline["cached_tokens"] >= sum(tokens for _, tokens in reused[1:])


def test_out_of_corpus_question_is_not_answered(local_rag: EnterpriseRAG) -> None:
    res = local_rag.query("What minimum Common Equity Tier 1 ratio does Northwind hold under Basel III?", DANA)
    assert is_not_found(res.answer, res.pipeline), res.answer
    assert res.pipeline["decision"] == "fallback" and not res.citations
