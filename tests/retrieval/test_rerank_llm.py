"""The LLM reranker (``reranker.provider: llm``) on the real store with a scripted grader LLM.

The reranked order follows the model's scores; a failed or malformed reply keeps
the fused order without dropping a candidate; the reranker only ever sees
passages the principal may read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.schema import NodeWithScore

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.ingest.pipeline import Ingestor
from enterprise_rag.retrieval.llm_rerank import LLMPointwiseRerank, passages_of
from enterprise_rag.retrieval.retriever import RetrievalOptions
from enterprise_rag.schema.documents import text_document
from enterprise_rag.testing.fake_llm import ScriptedLLM

QUESTION = "How are travel expenses reimbursed after a business trip?"
# Every document is about the question; each carries one marker word so a test can tell them apart.
PUBLIC_MARKERS = ["alpaca", "bison", "cheetah", "dingo"]
SECRET_MARKERS = ["egret", "falcon"]
STAFF = Principal("sam", ["staff"])
FINANCE = Principal("fay", ["staff", "finance"])
FLAT = RetrievalOptions(merge=False, expand_section=False)


def _doc(marker: str, variant: int) -> Any:
    text = (
        f"Travel expenses policy note {marker}. Business trip expenses are reimbursed within {10 + variant} days "
        f"after the trip when receipts are filed; code {marker} applies to travel reimbursement claims."
    )
    return text_document(f"policy/{marker}.md", f"Travel reimbursement {marker}", text)


def marker_of(text: str) -> str:
    [marker] = [m for m in PUBLIC_MARKERS + SECRET_MARKERS if m in text.lower()]
    return marker


def scripted(reply: Any) -> ScriptedLLM:
    """A grader whose ``rerank`` task answers ``reply(passages)`` (or raises)."""
    return ScriptedLLM({"rerank": lambda msgs, kw: reply(passages_of(msgs))})


def build_rag(dsn: str, tmp_path: Path, embed_model: Any, grader: ScriptedLLM, **reranker: Any) -> EnterpriseRAG:
    settings = load_settings(None, database={"dsn": dsn}, reranker={"provider": "llm", **reranker})
    return EnterpriseRAG(data_dir=tmp_path / "data", settings=settings, embed_model=embed_model, grader=grader)


@pytest.fixture
def dsn(fresh_dsn: str, tmp_path: Path, embed_model: Any) -> Iterator[str]:
    """A store with four staff-readable and two finance-only documents, all about the question."""
    rag = EnterpriseRAG(data_dir=tmp_path / "ingest", settings=load_settings(None, database={"dsn": fresh_dsn}),
                        embed_model=embed_model)  # fmt: skip
    ingestor = Ingestor(rag.db, embed_model, rag.settings.ingest)
    ingestor.ingest_documents([_doc(m, i) for i, m in enumerate(PUBLIC_MARKERS)], allowed_groups=["staff"])
    ingestor.ingest_documents([_doc(m, i) for i, m in enumerate(SECRET_MARKERS)], allowed_groups=["finance"])
    rag.close()
    yield fresh_dsn


def markers(nodes: list[NodeWithScore]) -> list[str]:
    return [marker_of(n.node.get_content()) for n in nodes]


def fused(rag: EnterpriseRAG, principal: Principal) -> list[str]:
    return markers(rag.as_retriever(principal, top_k=20, options=replace(FLAT, rerank=False)).retrieve(QUESTION))


def test_registry_builds_the_llm_reranker_from_settings(dsn: str, tmp_path: Path, embed_model: Any) -> None:
    grader = scripted(lambda ps: {})
    rag = build_rag(dsn, tmp_path, embed_model, grader, llm_candidates=3, llm_batch_size=2, llm_passage_chars=90)
    reranker = rag.providers.reranker
    assert isinstance(reranker, LLMPointwiseRerank)
    assert (reranker.candidates, reranker.batch_size, reranker.passage_chars) == (3, 2, 90)
    assert rag.providers.describe()["reranker"].startswith("llm:grader")
    rag.close()


def test_order_follows_the_llms_scores(dsn: str, tmp_path: Path, embed_model: Any) -> None:
    # The fused last becomes first, the fused first becomes last; the others tie and keep their fused order.
    rag = build_rag(dsn, tmp_path, embed_model, scripted(lambda ps: {}))
    before = fused(rag, STAFF)
    assert sorted(before) == sorted(PUBLIC_MARKERS)
    scores = {m: 1 for m in before} | {before[-1]: 3, before[0]: 0}
    grader = scripted(lambda ps: {pid: scores[marker_of(text)] for pid, text in ps.items()})
    rag = build_rag(dsn, tmp_path, embed_model, grader)
    after = markers(rag.as_retriever(STAFF, top_k=20, options=FLAT).retrieve(QUESTION))
    assert after == [before[-1], *before[1:-1], before[0]]
    assert grader.count("rerank") == 1


@pytest.mark.parametrize(
    "reply",
    [
        lambda ps: "P1: 3, P2: 0",  # not JSON
        lambda ps: {pid: 3 for pid in list(ps)[1:]},  # one passage skipped
        lambda ps: {pid: 7 for pid in ps},  # outside the 0-3 scale
        lambda ps: {pid: "high" for pid in ps},  # wrong type
        lambda ps: (_ for _ in ()).throw(TimeoutError("no answer")),  # the call itself fails
    ],
    ids=["not-json", "missing-id", "out-of-scale", "wrong-type", "call-fails"],
)
def test_malformed_or_failed_reply_keeps_the_fused_order_and_every_candidate(
    dsn: str, tmp_path: Path, embed_model: Any, reply: Any
) -> None:
    grader = scripted(reply)
    rag = build_rag(dsn, tmp_path, embed_model, grader)
    before = fused(rag, STAFF)
    after = markers(rag.as_retriever(STAFF, top_k=20, options=FLAT).retrieve(QUESTION))
    assert grader.count("rerank") == 1  # the reranker really ran (and failed)
    assert after == before


def test_only_the_head_is_scored_in_batches_and_the_tail_keeps_its_order(
    dsn: str, tmp_path: Path, embed_model: Any
) -> None:
    seen: list[dict[str, str]] = []

    def reply(ps: dict[str, str]) -> dict[str, int]:
        seen.append(ps)
        return {pid: 0 if i == 0 else 3 for i, pid in enumerate(ps)}  # every batch: first passage down

    rag = build_rag(dsn, tmp_path, embed_model, scripted(reply), llm_candidates=3, llm_batch_size=2,
                    llm_passage_chars=60)  # fmt: skip
    before = fused(rag, FINANCE)
    assert len(before) == 6
    after = markers(rag.as_retriever(FINANCE, top_k=20, options=FLAT).retrieve(QUESTION))
    assert [len(ps) for ps in seen] == [2, 1]
    assert after == [before[1], before[0], before[2], *before[3:]]  # scores 0, 3 | 0; ties keep the fused order
    for ps in seen:
        for text in ps.values():
            title, _, body = text.partition("\n")
            assert title.startswith("Travel reimbursement") and len(body) <= 60


def test_a_failed_second_batch_keeps_the_fused_order(dsn: str, tmp_path: Path, embed_model: Any) -> None:
    replies = iter([{"P1": 0, "P2": 3}, "garbage"])
    rag = build_rag(dsn, tmp_path, embed_model, scripted(lambda ps: next(replies)), llm_candidates=4,
                    llm_batch_size=2)  # fmt: skip
    before = fused(rag, STAFF)
    assert markers(rag.as_retriever(STAFF, top_k=20, options=FLAT).retrieve(QUESTION)) == before


@pytest.mark.parametrize("merge", [False, True])
def test_the_reranker_only_sees_candidates_the_principal_may_read(
    dsn: str, tmp_path: Path, embed_model: Any, merge: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts: list[dict[str, str]] = []
    inputs: list[list[NodeWithScore]] = []

    def reply(ps: dict[str, str]) -> dict[str, int]:
        prompts.append(ps)
        return {pid: 3 for pid in ps}

    original = LLMPointwiseRerank._postprocess_nodes

    def recording(self: LLMPointwiseRerank, nodes: list[NodeWithScore], query_bundle: Any = None) -> Any:
        inputs.append(list(nodes))
        return original(self, nodes, query_bundle)

    monkeypatch.setattr(LLMPointwiseRerank, "_postprocess_nodes", recording)
    options = RetrievalOptions(merge=merge, expand_section=merge)
    for principal, readable in [(STAFF, PUBLIC_MARKERS), (FINANCE, PUBLIC_MARKERS + SECRET_MARKERS)]:
        prompts.clear()
        inputs.clear()
        rag = build_rag(dsn, tmp_path, embed_model, scripted(reply), llm_candidates=20, llm_batch_size=20)
        out = rag.as_retriever(principal, top_k=20, options=options).retrieve(QUESTION)
        [received] = inputs
        [prompt] = prompts
        # Exactly the readable documents reach the reranker, its prompt, and the result; never another one.
        assert {marker_of(n.node.get_content()) for n in received} == set(readable)
        assert {marker_of(text) for text in prompt.values()} == set(readable)
        assert {marker_of(n.node.get_content()) for n in out} == set(readable)
        rag.close()
