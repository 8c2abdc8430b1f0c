"""Every answer expectation of ../shared/scenarios/scenarios.yaml, with the real local LLM (web disabled)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.config import load_settings
from tests.conftest import SCENARIOS
from tests.support.databases import create_db
from tests.support.scenario_matching import answer_failures

if not (SCENARIOS / "scenarios.yaml").is_file():
    pytest.skip("scenarios not available", allow_module_level=True)

SUITE = yaml.safe_load((SCENARIOS / "scenarios.yaml").read_text())
CASES = [c for c in SUITE["cases"] if c["kind"] in ("answer", "both")]
pytestmark = [pytest.mark.slow, pytest.mark.answers]


@pytest.fixture(scope="module")
def answer_rag(server_dsn: str, embed_model, model_data_dir: Path) -> Iterator[EnterpriseRAG]:  # type: ignore[no-untyped-def]
    name = "scenarios_answers"
    dsn = create_db(server_dsn, name)
    rag = EnterpriseRAG(data_dir=model_data_dir, settings=load_settings(None, database={"dsn": dsn}),
                        embed_model=embed_model)  # fmt: skip
    for doc in SUITE["documents"]:
        assert not rag.ingest([SCENARIOS / doc["path"]], allowed_groups=doc["allowed_groups"]).failed
    yield rag
    rag.close()


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_answer_case(answer_rag: EnterpriseRAG, case: dict[str, Any]) -> None:
    expect = case["expect"]
    user = Principal(user_id=case["user"]["user_id"], groups=case["user"]["groups"])
    try:
        res = answer_rag.query(case["question"], user=user, history=case.get("history") or None)
    except Exception:
        if expect.get("error_ok"):
            return
        raise
    failures = answer_failures(case, res.answer, res.pipeline, [c.source for c in res.citations])
    assert not failures, f"{failures}: answer={res.answer!r} pipeline={res.pipeline}"
    assert set(res.to_dict()) == {"answer", "citations", "evaluation", "pipeline", "trace_id"}
