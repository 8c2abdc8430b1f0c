"""Answer-workflow benchmark on a scenario suite with the local LLM (web disabled).

Prints, in one run: each answer case against its expectations (the same check as
tests/acceptance/test_scenarios_answers.py), then a table per failure type (the
section comment a case sits under in the suite file, mapped to the common names:
page split, identifier, version, follow-up, multi-document, list, numeric,
negative fact, false premise, unanswerable, permission, injection, paraphrase):

* pass rate;
* false not-found: a case with an answer to give, answered not-found;
* false answer: a case expecting a not-found (out of the corpus, or forbidden), answered anyway;
* citation precision: the cited sentences of the answer at least half of whose content words are in the
  sources they cite, over all cited sentences; and number precision: the numbers of cited sentences
  found in their cited sources.

Then LLM calls and tokens per query by path (proceed / fallback / revised), and latency against a floor
measured in the same run: after each question, one plain chat call of the same local model with the
question's final generation prompt (the last generate / revise call of its trace, behind a fresh first
line so nothing of it is cached), made to produce as many tokens as that answer had. Printed: seconds per
question p50/p95, the floor's p50/p95, the median of per-question latency / floor, and prompt tokens
evaluated vs reused from the server's prompt cache (its own counters, from the trace), and whether the
sources were evaluated once: for each question, the prefix of its final generation (the system message:
rules and sources; its length in tokens is the server's count for that message alone) and the least
share of it that any later call of the same prefix (grades, generation, revisions, check) read from the
cache; "once" means every later call reused at least 90%.
``--comparisons`` adds the saving of the shared prompt prefix (generation -> check) against a cold KV cache
(grading is measured by benchmarks/grading.py). ``--speculative`` replays every question's final generation
prompt on fresh engines of the same model without and with llama.cpp's n-gram (prompt lookup)
speculative decoding, at temperature 0: tokens/s (median) and how many answers come out identical.
``--oracle`` measures the ceiling of the answer layer: each answerable case is asked by a user who may read
only its gold documents (those its ``cites_sources_any`` / ``retrieved_sources_any`` name, ingested again for
that user alone), so a case that fails here fails in evidence or generation, not in finding the documents;
cases without gold documents (not-found, forbidden) are left out.
``--calls FILE`` appends, per question, its steps, LLM calls (tokens, milliseconds), each sentence's verification
(text, the judge's p(yes) or none, the reason it failed in code), each graded unit (text, grade, p(yes), method) and
screened paragraph (text, score), each weak-evidence answer grade (with the answer it withheld, if any), whether
it passed and its answer, as JSON lines.

    .venv/bin/python benchmarks/answer.py [--suite ../shared/scenarios-dev] [--limit N] [--cases id1,id2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml
from _common import SHARED, fresh_database, temp_data_dir
from llama_index.core.llms import ChatMessage

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.answer.checks.citations import cited_labels, split_sentences, strip_citations
from enterprise_rag.answer.checks.numbers import numbers
from enterprise_rag.answer.sources import corpus_sources
from enterprise_rag.config import load_settings
from enterprise_rag.llm import prompts
from enterprise_rag.store.embedded import start_embedded, stop_embedded
from enterprise_rag.text import terms

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository, for the suite's matching rules
from tests.support.scenario_matching import answer_failures, is_not_found, source_matches  # noqa: E402


def path_of(pipeline: dict[str, Any]) -> str:
    if pipeline["hallucination_retries"] or pipeline["usefulness_retries"] or pipeline["flagged_for_review"]:
        return "revised"
    if pipeline.get("not_found") or pipeline["decision"] == "fallback":
        return "fallback"
    return "proceed"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timed_chat(llm: Any, messages: list[ChatMessage], **kwargs: Any) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    response = llm.chat(messages, **kwargs)
    raw = response.raw if isinstance(response.raw, dict) else {}
    return time.perf_counter() - t0, raw


def final_generation(trace: dict[str, Any]) -> dict[str, Any] | None:
    """The last generate / revise call of ``trace``; None when the question was answered without generating
    (not found before generation, small talk)."""
    return next((c for c in reversed(trace["llm_calls"]) if c["name"] in ("generate", "revise")), None)


def floor_seconds(rag: EnterpriseRAG, trace: dict[str, Any]) -> float | None:
    """One cold plain chat call of the final generation prompt of ``trace``, as long as its answer."""
    final = final_generation(trace)
    if final is None:
        return None
    llm = rag.providers.generator
    messages = [ChatMessage(role=m["role"], content=m["content"]) for m in final["messages"]]
    messages[0] = ChatMessage(role=messages[0].role, content=f"{uuid.uuid4()}\n{messages[0].content}")
    t0 = time.perf_counter()  # ignore_eos: the same answer length, whatever the model writes after the nonce
    llm.chat(messages, max_tokens=max(1, final["completion_tokens"]), ignore_eos=True)
    return time.perf_counter() - t0


def prefix_reuse(rag: EnterpriseRAG, trace: dict[str, Any]) -> tuple[int, float] | None:
    """(tokens of the final generation's prefix, the least share of it a later call with that prefix reused);
    None when fewer than two calls share it."""
    final = final_generation(trace)
    if final is None:
        return None
    system = final["messages"][0]["content"]
    shared = [c for c in trace["llm_calls"] if c["messages"][0]["content"] == system]
    if len(shared) < 2:
        return None
    _, raw = timed_chat(rag.providers.generator, [ChatMessage(role="system", content=system)], max_tokens=1)
    prefix = int(raw.get("usage", {}).get("prompt_tokens", 0)) - 3  # without the assistant header the template adds
    return prefix, min(c["cached_tokens"] for c in shared[1:]) / max(1, prefix)


SPECULATION = {  # name -> (type, n-gram size, draft length); None: llama.cpp's defaults
    "none": None,
    "ngram-simple (llama.cpp defaults)": ("NGRAM_SIMPLE", None, None),
    "ngram-simple n=3, draft 16": ("NGRAM_SIMPLE", 3, 16),
    "ngram-map-k n=3, draft 16": ("NGRAM_MAP_K", 3, 16),
}


def speculative_comparison(model: Path, prompts: list[list[dict[str, str]]], max_tokens: int) -> None:
    """Decode speed and identical output of each speculation mode on the same prompts, one engine each."""
    import xllamacpp

    outputs: dict[str, list[str]] = {}
    for name, mode in SPECULATION.items():
        params = xllamacpp.CommonParams()
        params.model.path, params.n_ctx, params.n_parallel = str(model), 8192, 1
        params.cache_prompt, params.verbosity, params.warmup = True, -1, False
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = len(os.sched_getaffinity(0))
        if mode is not None:
            kind, n, m = mode
            params.speculative.types = [getattr(xllamacpp.common_speculative_type, f"COMMON_SPECULATIVE_TYPE_{kind}")]
            for table in (params.speculative.ngram_simple, params.speculative.ngram_map_k):
                if n is not None:
                    table.size_n, table.size_m = n, m
        server = xllamacpp.Server(params)
        speeds, drafted, accepted, texts = [], 0, 0, []
        for messages in prompts:
            r = server.handle_chat_completions({"messages": messages, "max_tokens": max_tokens, "temperature": 0.0,
                                                "seed": 0})  # fmt: skip
            timings = r.get("timings", {})
            speeds.append(float(timings.get("predicted_per_second", 0.0)))
            drafted += int(timings.get("draft_n", 0) or 0)
            accepted += int(timings.get("draft_n_accepted", 0) or 0)
            texts.append(r["choices"][0]["message"]["content"])
        outputs[name] = texts
        same = sum(a == b for a, b in zip(texts, outputs["none"], strict=True))
        print(
            f"  {name:36} decode {statistics.median(speeds):5.1f} tokens/s (median of {len(prompts)}), drafted "
            f"{drafted}, accepted {accepted}; identical to no speculation: {same}/{len(prompts)}",
            flush=True,
        )
        del server


def prefix_comparison(rag: EnterpriseRAG, cases: list[dict[str, Any]]) -> None:
    llm = rag.providers.generator
    warm = cold = 0.0
    cached_tokens = 0
    for case in cases:
        user = Principal(case["user"]["user_id"], case["user"]["groups"])
        sources = corpus_sources(rag.retrieve(case["question"], user=user, top_k=3))
        timed_chat(llm, prompts.answer_messages(sources, case["question"], []), max_tokens=64)
        s, raw = timed_chat(llm, prompts.support_messages(sources, [], "Draft answer."), max_tokens=1)
        warm += s
        cached_tokens += raw.get("usage", {}).get("prompt_tokens_details", {}).get("cached_tokens", 0)
        # Cold: the same check with a different first token, so no cached prefix can be reused
        # (an unrelated call in between does not evict it: the server keeps its prompt cache).
        cold_messages = prompts.support_messages(sources, [], "Draft answer.")
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


FAILURE_TYPES = (
    ("page split", ("page", "pdf")),
    ("identifier", ("identifier", "code")),
    ("version", ("superseded", "version")),
    ("follow-up", ("follow-up", "follow up", "multi-turn", "history")),
    ("multi-document", ("two documents", "multi-document", "several documents")),
    ("list", ("list",)),
    ("numeric", ("numeric", "number", "threshold")),
    ("negative fact", ("negative fact",)),
    ("false premise", ("false premise",)),
    ("unanswerable", ("not in the corpus", "unanswerable")),
    ("permission", ("access control", "permission", "acl")),
    ("injection", ("injection",)),
    ("paraphrase", ("paraphrase", "all-caps")),
)
_SECTION = re.compile(r"^\s*#\s*-{2,}\s*(.+?)\s*-*\s*$")
_CASE_ID = re.compile(r"^\s*-\s*id:\s*(\S+)")


def failure_types(suite_text: str) -> dict[str, str]:
    """Case id -> failure type, from the section comment (``# --- Superseded vs current ---``) above it."""
    out, section = {}, "other"
    for line in suite_text.splitlines():
        if m := _SECTION.match(line):
            heading = m.group(1).lower()
            section = next((name for name, keys in FAILURE_TYPES if any(k in heading for k in keys)), heading)
        elif m := _CASE_ID.match(line):
            out[m.group(1)] = section
    return out


def citation_counts(res: Any) -> tuple[int, int, int, int]:
    """(cited sentences, of them grounded in their cited sources, numbers in cited sentences, of them found in
    their cited sources). Grounded: at least half the sentence's content words are in the sources it cites."""
    texts = {s["label"]: s["text"] for s in res.sources}
    sentences = grounded = n_numbers = n_found = 0
    for sentence in split_sentences(res.answer):
        cited = [texts[label] for label in cited_labels(sentence) if label in texts]
        if not cited:
            continue
        plain = strip_citations(sentence)
        words, held = set(terms(plain)), set().union(*(terms(t) for t in cited))
        sentences += 1
        grounded += not words or len(words & held) / len(words) >= 0.5
        wanted = numbers(plain)
        known = set().union(*(numbers(t) for t in cited))
        n_numbers += len(wanted)
        n_found += len(wanted & known)
    return sentences, grounded, n_numbers, n_found


def ratio(num: int, den: int) -> str:
    return f"{num / den:.2f}" if den else "-"


def type_table(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'failure type':16} {'cases':>5} {'passed':>7} {'false nf':>9} {'false ans':>10} "
          f"{'cite prec':>10} {'num prec':>9}")  # fmt: skip
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row["type"]].append(row)
    for name, items in [*sorted(groups.items()), ("ALL", rows)]:
        cites, quotes, nums, nums_found = (sum(r["citations"][i] for r in items) for i in range(4))
        print(f"{name:16} {len(items):5} {sum(r['ok'] for r in items):3}/{len(items):<3} "
              f"{sum(r['false_not_found'] for r in items):9} {sum(r['false_answer'] for r in items):10} "
              f"{ratio(quotes, cites):>10} {ratio(nums_found, nums):>9}")  # fmt: skip


def gold_documents(case: dict[str, Any], documents: list[dict[str, Any]]) -> list[str]:
    """The suite paths of the documents a case's expectations name as where its answer is."""
    expect = case["expect"]
    named = [*expect.get("cites_sources_any", []), *expect.get("retrieved_sources_any", [])]
    return [d["path"] for d in documents if source_matches(d["path"], named)]


def ingest_oracle(rag: EnterpriseRAG, suite: Path, cases: list[dict[str, Any]], folder: Path) -> dict[str, Principal]:
    """Each case's gold documents copied under ``folder/<case id>/`` (keeping their suite paths, so citations
    match as before) and ingested readable by that case's oracle user alone; case id -> that user."""
    users, documents = {}, suite_documents(suite)
    for case in cases:
        gold = gold_documents(case, documents)
        if not gold:
            continue
        for path in gold:
            target = folder / case["id"] / path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(suite / path, target)
        user = Principal(f"oracle-{case['id']}", [])
        report = rag.ingest([folder / case["id"]], allowed_users=[user.user_id])
        if report.failed:
            raise SystemExit(f"ingest failed: {report.failed}")
        users[case["id"]] = user
    return users


def suite_documents(suite: Path) -> list[dict[str, Any]]:
    return list(yaml.safe_load((suite / "scenarios.yaml").read_text())["documents"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", type=Path, default=SHARED / "scenarios", help="folder with scenarios.yaml")
    parser.add_argument("--limit", type=int, default=None, help="only the first N answer cases")
    parser.add_argument("--cases", default="", help="comma-separated case ids (default: every answer case)")
    parser.add_argument("--config", type=Path, default=None, help="settings file (default: the built-in defaults)")
    parser.add_argument("--comparisons", action="store_true", help="also time prefix reuse")
    parser.add_argument("--sample", type=int, default=4, help="questions for the prefix comparison")
    parser.add_argument("--speculative", action="store_true", help="also compare n-gram speculative decoding")
    parser.add_argument("--oracle", action="store_true", help="ask each case over its gold documents alone")
    parser.add_argument("--no-floor", action="store_true", help="skip the floor (pass rates and tokens only)")
    parser.add_argument("--calls", type=Path, default=None, help="append each question's steps and LLM calls "
                        "(tokens, ms) to this JSON-lines file")  # fmt: skip
    args = parser.parse_args()
    suite_text = (args.suite / "scenarios.yaml").read_text()
    suite, types = yaml.safe_load(suite_text), failure_types(suite_text)
    wanted = {c for c in args.cases.split(",") if c}
    cases = [c for c in suite["cases"] if c["kind"] in ("answer", "both") and (not wanted or c["id"] in wanted)]
    cases = cases[: args.limit]
    server_dir = temp_data_dir("erag-bench-answer-")
    server = start_embedded(server_dir)
    try:
        dsn = fresh_database(server, "bench_answer")
        settings = load_settings(args.config, database={"dsn": dsn})
        rag = EnterpriseRAG(data_dir=server_dir / "data", settings=settings)
        oracle: dict[str, Principal] = {}
        if args.oracle:
            oracle = ingest_oracle(rag, args.suite, cases, server_dir / "oracle")
            cases = [c for c in cases if c["id"] in oracle]
        else:
            for doc in suite["documents"]:
                report = rag.ingest([args.suite / doc["path"]], allowed_groups=doc["allowed_groups"])
                if report.failed:
                    raise SystemExit(f"ingest failed: {report.failed}")
        rag.providers.generator.complete("Say OK.", max_tokens=2)  # load the model before timing
        by_path: dict[str, list[dict[str, Any]]] = defaultdict(list)
        seconds: list[float] = []
        floors: list[tuple[float, float]] = []  # (latency, floor) of the questions that generated
        reuse: dict[str, list[float]] = defaultdict(list)  # path -> least prefix share reused per question
        final_prompts: list[list[dict[str, str]]] = []
        rows: list[dict[str, Any]] = []
        print(f"suite {args.suite} ({suite.get('suite', '')}): {len(cases)} answer cases"
              f"{' over their gold documents alone (oracle)' if args.oracle else ''}", flush=True)  # fmt: skip
        for case in cases:
            user = oracle.get(case["id"]) or Principal(case["user"]["user_id"], case["user"]["groups"])
            t0 = time.perf_counter()
            res = rag.query(case["question"], user=user, history=case.get("history") or None)
            seconds.append(time.perf_counter() - t0)
            p = res.pipeline
            trace: dict[str, Any] = rag.trace(res.trace_id, user) or {"llm_calls": []}
            shared = prefix_reuse(rag, trace)
            if shared is not None:
                reuse[path_of(p)].append(shared[1])
            floor = None if args.no_floor else floor_seconds(rag, trace)
            if (final := final_generation(trace)) is not None:
                final_prompts.append(final["messages"])
            if floor is not None:
                floors.append((seconds[-1], floor))
            by_path[path_of(p)].append(p)
            failures = answer_failures(case, res.answer, p, [c.source for c in res.citations])
            if args.calls is not None:
                with args.calls.open("a") as out:
                    out.write(json.dumps({
                        "id": case["id"], "seconds": round(seconds[-1], 1), "floor": floor,
                        "steps": [(st["step"], st["ms"]) for st in trace.get("steps", [])],
                        "judged": [j for st in trace.get("steps", []) if st["step"] == "verify"
                                   for j in st["data"].get("judged", [])],
                        "graded": [unit for st in trace.get("steps", []) if st["step"] == "grade"
                                   for unit in st["data"].get("evidence", [])],
                        "screened": [par for st in trace.get("steps", []) if st["step"] == "screen"
                                     for par in st["data"].get("paragraphs", [])],
                        "answer_grades": [(st["data"].get("answer_grade"), st["data"].get("withheld"))
                                          for st in trace.get("steps", []) if st["step"] == "finish"],
                        "ok": not failures,
                        "answer": res.answer,
                        "calls": [{k: c[k] for k in ("name", "prompt_tokens", "cached_tokens", "completion_tokens",
                                                     "ms")} for c in trace["llm_calls"]],
                    }) + "\n")  # fmt: skip
            expects_not_found = bool(case["expect"].get("not_found"))
            not_found = is_not_found(res.answer, p)
            rows.append({
                "id": case["id"], "type": types.get(case["id"], "other"), "ok": not failures,
                "false_not_found": not_found and not expects_not_found and bool(case["expect"].get(
                    "answer_contains_all") or case["expect"].get("answer_contains_any")),
                "false_answer": expects_not_found and not not_found,
                "citations": citation_counts(res), "failures": failures, "answer": res.answer,
            })  # fmt: skip
            print(f"  {case['id']:44} {'ok  ' if not failures else 'FAIL'} {rows[-1]['type']:14} {path_of(p):9} "
                  f"{p['decision']:8} calls {p['llm_calls']:2}  tokens {p['prompt_tokens']:5}+"
                  f"{p['completion_tokens']:4} reused {p['cached_tokens']:5}"
                  f"{f'  prefix {shared[0]:5} reused >= {shared[1]:4.0%}' if shared else ''}  {seconds[-1]:6.1f} s"
                  f"{f'  floor {floor:5.1f} s' if floor is not None else ''}", flush=True)  # fmt: skip
        if rows:
            passed = sum(r["ok"] for r in rows)
            print(f"\nanswer expectations met: {passed}/{len(rows)} ({passed / len(rows):.0%})")
            for r in rows:
                if not r["ok"]:
                    print(f"  FAIL {r['id']}: {r['failures']}\n       answer: {r['answer'][:300]!r}")
            type_table(rows)
            print(f"\n{'path':10} {'queries':>8} {'LLM calls':>10} {'prompt tok':>11} {'evaluated':>10} "
                  f"{'reused':>7} {'compl tok':>10} (means per query)")  # fmt: skip
            for path, items in sorted(by_path.items()):
                print(f"{path:10} {len(items):8} {statistics.mean(r['llm_calls'] for r in items):10.1f} "
                      f"{statistics.mean(r['prompt_tokens'] for r in items):11.0f} "
                      f"{statistics.mean(r['prompt_tokens'] - r['cached_tokens'] for r in items):10.0f} "
                      f"{statistics.mean(r['cached_tokens'] for r in items):7.0f} "
                      f"{statistics.mean(r['completion_tokens'] for r in items):10.0f}")  # fmt: skip
            for path, shares in sorted(reuse.items()):
                once = sum(x >= 0.9 for x in shares)
                print(f"sources evaluated once ({path}): {once}/{len(shares)} questions whose every later call "
                      f"reused >= 90% of the final prefix (least share {min(shares):.0%})")  # fmt: skip
            print(
                f"seconds per query: p50 {statistics.median(seconds):.1f}  p95 {pct(seconds, 0.95):.1f}  "
                f"({len(seconds)} queries, local model, {len(os.sched_getaffinity(0))} cores)"
            )
            if floors:
                latency, cold = [x[0] for x in floors], [x[1] for x in floors]
                ratio_p50 = statistics.median(latency) / statistics.median(cold)
                print(f"floor (one plain call of the final generation prompt, same answer length): p50 "
                      f"{statistics.median(cold):.1f}  p95 {pct(cold, 0.95):.1f} s; questions that generated: "
                      f"latency p50 {statistics.median(latency):.1f} s = {ratio_p50:.2f}x the floor's p50, "
                      f"median per-question ratio {statistics.median(a / b for a, b in floors):.2f}x")  # fmt: skip
        if args.comparisons:
            sample = [c for c in cases if c["kind"] == "both"][: args.sample]
            prefix_comparison(rag, sample)
        if args.speculative and final_prompts:
            print("\nn-gram speculative decoding on the final generation prompts (temperature 0):")
            speculative_comparison(rag.providers.generator.model_path, final_prompts,  # type: ignore[attr-defined]
                                   settings.workflow.answer_max_tokens)  # fmt: skip
        rag.close()
    finally:
        stop_embedded(server_dir)


if __name__ == "__main__":
    main()
