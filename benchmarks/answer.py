"""Answer-workflow benchmark on the scenario questions with the local LLM (web disabled).

Prints, in one run: each case against its expectations in scenarios.yaml (the same
check as tests/acceptance/test_scenarios_answers.py), LLM calls and tokens per
query by path (proceed / fallback / revised), seconds per query p50/p95, the saving of one batched grading call
against one call per passage, and the saving of the shared prompt prefix
(generation -> check) against a cold KV cache.

    .venv/bin/python benchmarks/answer.py [--limit N] [--sample 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml
from _common import SHARED, fresh_database, temp_data_dir
from llama_index.core.llms import ChatMessage, MessageRole

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.answer.sources import corpus_sources
from enterprise_rag.config import load_settings
from enterprise_rag.llm import prompts
from enterprise_rag.retrieval.windows import focus
from enterprise_rag.store.embedded import start_embedded, stop_embedded

SCENARIOS = SHARED / "scenarios"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository, for the suite's matching rules
from tests.support.scenario_matching import answer_failures  # noqa: E402


def path_of(pipeline: dict[str, Any]) -> str:
    if pipeline["hallucination_retries"] or pipeline["usefulness_retries"] or pipeline["flagged_for_review"]:
        return "revised"
    if pipeline.get("not_found") or pipeline["decision"] == "fallback":
        return "fallback"
    return "proceed"


def second_opinion(rag: EnterpriseRAG, trace_id: str, user: Principal, not_found: bool) -> str:
    """'kept' / 'dropped' when the generator was asked for a second opinion after a not-found, else '-'."""
    trace = rag.trace(trace_id, user) or {"steps": []}
    if not any(s["step"] == "generate" and s["data"].get("second_opinion") for s in trace["steps"]):
        return "-"
    return "dropped" if not_found else "kept"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timed_chat(llm: Any, messages: list[ChatMessage], **kwargs: Any) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    response = llm.chat(messages, **kwargs)
    raw = response.raw if isinstance(response.raw, dict) else {}
    return time.perf_counter() - t0, raw


def grading_comparison(rag: EnterpriseRAG, cases: list[dict[str, Any]]) -> None:
    llm = rag.providers.grader
    batched_s = single_s = 0.0
    batched_tok = single_tok = 0
    for case in cases:
        user = Principal(case["user"]["user_id"], case["user"]["groups"])
        nodes = rag.retrieve(case["question"], user=user, top_k=5)
        passages = [(f"P{i}", focus(case["question"], n.node.get_content(), 700)) for i, n in enumerate(nodes, 1)]
        ids = [p for p, _ in passages]
        fmt = {"type": "json_schema", "json_schema": {"name": "grade", "schema": prompts.grade_schema(ids)}}
        timed_chat(llm, [ChatMessage(role=MessageRole.USER, content="Say OK.")], max_tokens=2)  # evict the cache
        s, raw = timed_chat(llm, prompts.grade_messages(case["question"], passages), max_tokens=240,
                            response_format=fmt)  # fmt: skip
        batched_s += s
        batched_tok += sum(raw.get("usage", {}).get(k, 0) for k in ("prompt_tokens", "completion_tokens"))
        for pid, text in passages:
            one = {"type": "json_schema", "json_schema": {"name": "grade", "schema": prompts.grade_schema([pid])}}
            s, raw = timed_chat(llm, prompts.grade_messages(case["question"], [(pid, text)]), max_tokens=60,
                                response_format=one)  # fmt: skip
            single_s += s
            single_tok += sum(raw.get("usage", {}).get(k, 0) for k in ("prompt_tokens", "completion_tokens"))
    n = len(cases)
    print(f"\ngrading, {n} questions x 5 passages: batched {batched_s / n:.1f} s and {batched_tok / n:.0f} tokens "
          f"per question; one call per passage {single_s / n:.1f} s and {single_tok / n:.0f} tokens "
          f"-> batched saves {1 - batched_s / single_s:.0%} of the time")  # fmt: skip


def prefix_comparison(rag: EnterpriseRAG, cases: list[dict[str, Any]]) -> None:
    llm = rag.providers.generator
    warm = cold = 0.0
    cached_tokens = 0
    for case in cases:
        user = Principal(case["user"]["user_id"], case["user"]["groups"])
        sources = corpus_sources(rag.retrieve(case["question"], user=user, top_k=3))
        timed_chat(llm, prompts.generate_messages(sources, case["question"]), max_tokens=64)
        s, raw = timed_chat(llm, prompts.check_messages(sources, case["question"], "Draft answer. [S1]"),
                            max_tokens=1)  # fmt: skip
        warm += s
        cached_tokens += raw.get("usage", {}).get("prompt_tokens_details", {}).get("cached_tokens", 0)
        # Cold: the same check with a different first token, so no cached prefix can be reused
        # (an unrelated call in between does not evict it: the server keeps its prompt cache).
        cold_messages = prompts.check_messages(sources, case["question"], "Draft answer. [S1]")
        cold_messages[0] = ChatMessage(
            role=cold_messages[0].role, content=f"{uuid.uuid4()}\n{cold_messages[0].content}"
        )
        s, _ = timed_chat(llm, cold_messages, max_tokens=1)
        cold += s
    n = len(cases)
    print(
        f"check call after generation (shared prefix): {warm / n:.1f} s, {cached_tokens / n:.0f} prompt tokens "
        f"reused; cold cache: {cold / n:.1f} s -> prefix reuse saves {1 - warm / cold:.0%} of the prompt time"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=None, help="only the first N answer cases")
    parser.add_argument("--sample", type=int, default=4, help="questions for the grading / prefix comparisons")
    parser.add_argument("--comparisons-only", action="store_true", help="skip the scenario cases")
    args = parser.parse_args()
    suite = yaml.safe_load((SCENARIOS / "scenarios.yaml").read_text())
    cases = [c for c in suite["cases"] if c["kind"] in ("answer", "both")][: args.limit]
    server_dir = temp_data_dir("erag-bench-answer-")
    server = start_embedded(server_dir)
    try:
        dsn = fresh_database(server, "bench_answer")
        rag = EnterpriseRAG(data_dir=server_dir / "data", settings=load_settings(None, database={"dsn": dsn}))
        for doc in suite["documents"]:
            rag.ingest([SCENARIOS / doc["path"]], allowed_groups=doc["allowed_groups"])
        rag.providers.generator.complete("Say OK.", max_tokens=2)  # load the model before timing
        by_path: dict[str, list[dict[str, Any]]] = defaultdict(list)
        seconds, failed = [], []
        second_opinions: dict[str, int] = defaultdict(int)
        for case in [] if args.comparisons_only else cases:
            user = Principal(case["user"]["user_id"], case["user"]["groups"])
            t0 = time.perf_counter()
            res = rag.query(case["question"], user=user, history=case.get("history") or None)
            seconds.append(time.perf_counter() - t0)
            p = res.pipeline
            by_path[path_of(p)].append(p)
            failures = answer_failures(case, res.answer, p, [c.source for c in res.citations])
            second = second_opinion(rag, res.trace_id, user, bool(p.get("not_found")))
            second_opinions[second] += 1
            if failures:
                failed.append((case["id"], failures, res.answer))
            print(f"  {case['id']:38} {'ok  ' if not failures else 'FAIL'} {path_of(p):9} {p['decision']:8} "
                  f"2nd {second:7} "
                  f"calls {p['llm_calls']:2}  tokens {p['prompt_tokens']:5}+{p['completion_tokens']:4}  "
                  f"{seconds[-1]:6.1f} s", flush=True)  # fmt: skip
        if seconds:
            print(
                f"\nscenario answer expectations met: {len(cases) - len(failed)}/{len(cases)}; second opinions "
                f"after a not-found: {second_opinions['kept']} kept, {second_opinions['dropped']} dropped"
            )
            for case_id, failures, answer in failed:
                print(f"  FAIL {case_id}: {failures}\n       answer: {answer[:300]!r}")
            print(
                f"\n{'path':10} {'queries':>8} {'LLM calls':>10} {'prompt tok':>11} {'compl tok':>10} (means per query)"
            )
            for path, rows in sorted(by_path.items()):
                print(f"{path:10} {len(rows):8} {statistics.mean(r['llm_calls'] for r in rows):10.1f} "
                      f"{statistics.mean(r['prompt_tokens'] for r in rows):11.0f} "
                      f"{statistics.mean(r['completion_tokens'] for r in rows):10.0f}")  # fmt: skip
            print(
                f"seconds per query: p50 {statistics.median(seconds):.1f}  p95 {pct(seconds, 0.95):.1f}  "
                f"({len(seconds)} queries, local model, 2 cores)"
            )
        sample = [c for c in cases if c["kind"] == "both"][: args.sample]
        grading_comparison(rag, sample)
        prefix_comparison(rag, sample)
        rag.close()
    finally:
        stop_embedded(server_dir)


if __name__ == "__main__":
    main()
