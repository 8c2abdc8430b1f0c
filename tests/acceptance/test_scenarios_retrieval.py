"""Every retrieval expectation of ../shared/scenarios/scenarios.yaml, through the public API only."""

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
from tests.support.scenario_matching import contains, source_matches

if not (SCENARIOS / "scenarios.yaml").is_file():
    pytest.skip("scenarios not available", allow_module_level=True)

SUITE = yaml.safe_load((SCENARIOS / "scenarios.yaml").read_text())
CASES = [c for c in SUITE["cases"] if c["kind"] in ("retrieval", "both")]


@pytest.fixture(scope="module")
def scenario_rag(server_dsn: str, tmp_path_factory: pytest.TempPathFactory, embed_model) -> Iterator[EnterpriseRAG]:  # type: ignore[no-untyped-def]

    name = "scenarios_retrieval"
    dsn = create_db(server_dsn, name)
    data_dir = Path("/tmp") / f"erag-scenarios-{tmp_path_factory.getbasetemp().name}"
    rag = EnterpriseRAG(data_dir=data_dir, settings=load_settings(None, database={"dsn": dsn}), embed_model=embed_model)
    for doc in SUITE["documents"]:
        report = rag.ingest([SCENARIOS / doc["path"]], allowed_groups=doc["allowed_groups"])
        assert not report.failed, report.failed
    yield rag
    rag.close()


def _retrieve(rag: EnterpriseRAG, case: dict[str, Any], top_k: int) -> list[Any]:
    user = Principal(user_id=case["user"]["user_id"], groups=case["user"]["groups"])
    return rag.retrieve(case["question"], user=user, top_k=top_k, history=case.get("history") or None)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_retrieval_case(scenario_rag: EnterpriseRAG, case: dict[str, Any]) -> None:
    expect = case["expect"]
    nodes = _retrieve(scenario_rag, case, SUITE["top_k"])
    texts = [n.node.get_content() for n in nodes]
    sources = [n.node.metadata.get("source") for n in nodes]
    joined = "\n".join(texts)
    for item in expect.get("retrieved_contains_all", []):
        assert contains(joined, item), f"{item!r} not in top {SUITE['top_k']}: {sources}"
    if "retrieved_sources_any" in expect:
        assert any(source_matches(s, expect["retrieved_sources_any"]) for s in sources), sources
    for wanted in expect.get("retrieved_sources_all", []):
        assert any(source_matches(s, [wanted]) for s in sources), (wanted, sources)
    if "top1_contains" in expect:
        assert texts and contains(texts[0], expect["top1_contains"]), texts[:1]
    if "retrieved_sources_none" in expect or expect.get("retrieved_empty"):
        deep = _retrieve(scenario_rag, case, SUITE["permission_top_k"])
        for node in [*nodes, *deep]:
            assert not source_matches(node.node.metadata.get("source"), expect.get("retrieved_sources_none", []))
        if expect.get("retrieved_empty"):
            assert not nodes and not deep
