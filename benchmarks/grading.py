"""Relevance grading: how well the grader's p(yes) is calibrated, the two thresholds fitted to it, and the
grader it replaced (one batched JSON call per question, with its heading / similarity overrides).

Passages are what the answer workflow grades: the top ``retrieval.top_k`` (5) of retrieval, as configured,
for the asking user. Two labelled sets:

* dev scenarios (``--suite``, default ../shared/scenarios-dev): its documents ingested with their
  ``allowed_groups`` into a fresh embedded store; every case with answer expectations
  (``answer_contains_all`` / ``answer_contains_any``) is asked as its user (a follow-up is first rewritten
  into a standalone question, as the workflow does, and that question is graded). **Labelling rule:** a
  passage is relevant when it comes from a document in the case's ``retrieved_sources_any`` or
  ``cites_sources_any`` AND its text contains at least one of the case's ``answer_contains_all`` /
  ``answer_contains_any`` strings (the suite's own normalised matching). It is a proxy: a passage of the
  right document naming one of several expected items counts as relevant, one that answers in other
  words does not.
* SciFact test (../shared/data/scifact): the first ``--scifact`` claims (by id) with qrels; the store
  holds their cited abstracts plus, per claim, the ``--distractors`` abstracts sharing the most words
  with it (a small BM25 over the whole corpus), so the top 5 have hard negatives. A passage is relevant
  when its abstract is in the claim's qrels (unjudged abstracts count as not relevant: a lower bound).

The passages of a question are graded by the new grader as the workflow grades them: numbered and refined
into one set of sources that every grade call starts with (all ``top_k`` of them here, where the workflow puts
at most ``max_sources`` in one prefix; its seconds are spread evenly over the passages), without the
similarity floor, which gives p(yes) for every passage; figures "with floor" then treat passages under the
embedding model's floor as "no", as the workflow does without asking. The old grader is the code of the
commit this branch started from (``git merge-base HEAD main``: its grading module and prompt loaded from
git), run as it ran in the
workflow (floor 0.12, overrides at similarity >= 0.7 and on headings naming the question's codes or
acronyms); "old JSON only" reverts its overrides to the model's "no".

Printed, per data set and pooled: the reliability curve (bins of p(yes): count, mean p, observed
relevant share) and the expected calibration error (10 equal-width bins); the thresholds fitted on the
pooled data: ``partial`` = the highest threshold that keeps >= 95% of the relevant passages the grader
is asked about (a passage graded no never reaches the generator, partial ones do), ``yes`` = the
threshold maximising F1 of "yes" against relevance ("yes" decides whether the workflow proceeds or
rewrites the query, so a false yes and a missed yes both cost); then for new (fitted) and old graders:
accuracy of kept (yes/partial/ungraded) vs relevant and of yes vs relevant, recall of relevant passages
(kept), the share of relevant passages graded "no", precision and recall of "yes", and seconds per
question. Figures measured on the data the thresholds were fitted on are marked in-sample; the
cross-fitted rows fit on one set and measure on the other.

    .venv/bin/python benchmarks/grading.py [--suite DIR] [--scifact 50] [--distractors 10] [--no-old]
        [--save records.json] [--load records.json]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from _common import SCIFACT, SHARED, fresh_database, iter_scifact, temp_data_dir

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.answer.checks.grading import Grader
from enterprise_rag.answer.sources import corpus_sources, evidence_of, refine
from enterprise_rag.config import load_settings
from enterprise_rag.evaluation import load_beir
from enterprise_rag.ingest.pipeline import Ingestor
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.schema.documents import text_document
from enterprise_rag.store.embedded import start_embedded, stop_embedded

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the repository, for the suite's matching rules
from tests.support.scenario_matching import contains, source_matches  # noqa: E402

PUBLIC = Principal("bench", ["public"])
RECALL_TARGET = 0.95


@dataclass
class Record:
    """One graded passage: its label, the new grader's p(yes) and time, the old grader's grade."""

    dataset: str
    question_id: str
    node_id: str
    relevant: bool
    similarity: float | None
    p_yes: float | None
    new_s: float
    old_grade: str | None = None
    old_method: str | None = None


@dataclass
class QuestionTiming:
    dataset: str
    question_id: str
    old_s: float | None


# ---- the old grader, from git -------------------------------------------------------------------------------
def old_grader_class(ref: str) -> Any:
    """``Grader`` of ``ref``'s grading module, with that commit's prompt and text helpers (loaded from git)."""

    def load(name: str, path: str, replace: dict[str, str]) -> types.ModuleType:
        source = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=REPO, check=True, capture_output=True,
                                text=True).stdout  # fmt: skip
        for old, new in replace.items():
            source = source.replace(old, new)
        module = types.ModuleType(name)
        module.__file__ = f"{ref}:{path}"
        sys.modules[name] = module
        exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102
        return module

    load("_old_prompts", "enterprise_rag/llm/prompts.py", {})
    load("_old_text", "enterprise_rag/text.py", {})
    grading = load("_old_grading", "enterprise_rag/answer/checks/grading.py", {
        "from enterprise_rag.llm.prompts import": "from _old_prompts import",
        "from enterprise_rag.text import": "from _old_text import",
    })  # fmt: skip
    return grading.Grader


# ---- data ---------------------------------------------------------------------------------------------------
def fresh_rag(server: str, name: str, data_dir: Path) -> EnterpriseRAG:
    return EnterpriseRAG(
        data_dir=data_dir, settings=load_settings(None, database={"dsn": fresh_database(server, name)})
    )


def dev_questions(rag: EnterpriseRAG, suite: Path) -> Iterable[tuple[str, str, list[Any], Callable[[Any], bool]]]:
    """(case id, question as graded, top-k passages, relevance of a passage) per case with answer expectations."""
    spec = yaml.safe_load((suite / "scenarios.yaml").read_text())
    for doc in spec["documents"]:
        report = rag.ingest([suite / doc["path"]], allowed_groups=doc["allowed_groups"])
        if report.failed:
            raise SystemExit(f"ingest failed: {report.failed}")
    top_k = rag.settings.retrieval.top_k
    for case in spec["cases"]:
        expect = case["expect"]
        answers = [*expect.get("answer_contains_all", []), *expect.get("answer_contains_any", [])]
        sources = [*expect.get("retrieved_sources_any", []), *expect.get("cites_sources_any", [])]
        if not answers:
            continue
        user = Principal(case["user"]["user_id"], case["user"]["groups"])
        result = rag.as_retriever(user, top_k=top_k, history=case.get("history") or None).retrieve_with_trace(
            case["question"]
        )
        question = result.trace.get("queries", [case["question"]])[0]

        def relevant(node: Any, answers: list[Any] = answers, sources: list[str] = sources) -> bool:
            text = node.node.get_content()
            return source_matches(node.node.metadata.get("source"), sources) and any(contains(text, a) for a in answers)

        yield case["id"], question, result.nodes, relevant


_WORD = re.compile(r"[a-z0-9]+")


def bm25_neighbours(corpus: dict[str, str], claims: dict[str, str], k: int) -> set[str]:
    """The ``k`` abstracts of ``corpus`` with the highest BM25 score for each claim."""
    docs = {d: _WORD.findall(t.lower()) for d, t in corpus.items()}
    df: Counter[str] = Counter(w for words in docs.values() for w in set(words))
    n, avg = len(docs), sum(len(w) for w in docs.values()) / len(docs)
    tf = {d: Counter(words) for d, words in docs.items()}
    out: set[str] = set()
    for claim in claims.values():
        terms = set(_WORD.findall(claim.lower()))
        idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in terms if df[t]}
        scores = {
            d: sum(idf[t] * c[t] * 2.2 / (c[t] + 1.2 * (0.25 + 0.75 * len(docs[d]) / avg)) for t in idf if t in c)
            for d, c in tf.items()
        }
        out.update(sorted(scores, key=lambda d: -scores[d])[:k])
    return out


def scifact_questions(
    rag: EnterpriseRAG, claims_wanted: int, distractors: int
) -> Iterable[tuple[str, str, list[Any], Callable[[Any], bool]]]:
    evalset = load_beir(SCIFACT)
    ids = sorted((q for q in evalset.queries if any(g > 0 for g in evalset.qrels.get(q, {}).values())), key=int)
    claims = {q: evalset.queries[q] for q in ids[:claims_wanted]}
    records = {r["_id"]: r for r in iter_scifact()}
    cited = {d for q in claims for d, g in evalset.qrels[q].items() if g > 0}
    corpus = {d: f"{r['title']} {r['text']}" for d, r in records.items()}
    chosen = cited | bm25_neighbours(corpus, claims, distractors)
    docs = (text_document(f"scifact/{d}", records[d]["title"], records[d]["text"], {"document_id": d})
            for d in sorted(chosen))  # fmt: skip
    report = Ingestor(rag.db, rag.providers.embed_model, rag.settings.ingest).ingest_documents(
        docs, allowed_groups=["public"]
    )
    print(f"SciFact: {len(claims)} claims, {len(chosen)} abstracts ingested ({len(cited)} cited): {report.summary()}",
          flush=True)  # fmt: skip
    top_k = rag.settings.retrieval.top_k
    for q, claim in claims.items():
        positive = {d for d, g in evalset.qrels[q].items() if g > 0}

        def relevant(node: Any, positive: set[str] = positive) -> bool:
            return node.node.metadata.get("document_id") in positive

        yield q, claim, list(rag.retrieve(claim, user=PUBLIC, top_k=top_k)), relevant


# ---- grading --------------------------------------------------------------------------------------------------
def grade_all(
    rag: EnterpriseRAG, dataset: str, questions: Iterable[tuple[str, str, list[Any], Callable[[Any], bool]]],
    old_grader: Any | None, callers: dict[str, LLMCaller],
) -> tuple[list[Record], list[QuestionTiming]]:  # fmt: skip
    cfg = rag.settings.workflow
    embed = rag.providers.embed_model
    new = Grader(rag.db, callers["new"], thresholds=(0.0, 1.0), floor=None)
    old = None
    if old_grader is not None:
        old = old_grader(rag.db, callers["old"], floor=0.12, keep_similarity=0.7,
                         passage_chars=700, embed_model=embed)  # fmt: skip  (the old grader's window)
    records: list[Record] = []
    timings: list[QuestionTiming] = []
    for qid, question, nodes, relevant in questions:
        t0 = time.perf_counter()
        sources, _ = refine(question, corpus_sources(nodes), embed, cfg.refine_floor)
        units = evidence_of(question, sources, embed, cfg.evidence_units)
        graded = new.grade_units(question, sources, units)
        grades = {g.node_id: g for g in new.passage_grades(sources, units, graded)}  # a passage: its best unit
        seconds = (time.perf_counter() - t0) / max(1, len(nodes))
        rows = []
        for node in nodes:
            grade = grades[node.node.node_id]
            p = grade.confidence if grade.method in ("llm", "cache") else None
            rows.append(Record(dataset, qid, node.node.node_id, relevant(node), node.node.metadata.get("similarity"),
                               p, seconds))  # fmt: skip
        old_s = None
        if old is not None:
            t0 = time.perf_counter()
            for row, grade in zip(rows, old.grade(question, nodes), strict=True):
                row.old_grade, row.old_method = grade.grade, grade.method
            old_s = time.perf_counter() - t0
        records += rows
        timings.append(QuestionTiming(dataset, qid, old_s))
        print(f"  {dataset:8} {qid:40} relevant {sum(r.relevant for r in rows)}/{len(rows)}  p(yes) "
              + " ".join("  - " if r.p_yes is None else f"{r.p_yes:.2f}" for r in rows)
              + f"  old {' '.join((r.old_grade or '-')[:3] for r in rows)}"
              + f"  {sum(r.new_s for r in rows):5.1f} s / {old_s or 0:5.1f} s", flush=True)  # fmt: skip
    return records, timings


# ---- figures --------------------------------------------------------------------------------------------------
def below_floor(r: Record, floor: float | None) -> bool:
    return floor is not None and r.similarity is not None and r.similarity < floor


def new_label(r: Record, thresholds: tuple[float, float], floor: float | None) -> str:
    if below_floor(r, floor):
        return "no"
    if r.p_yes is None:
        return "ungraded"
    partial, yes = thresholds
    return "yes" if r.p_yes >= yes else "partial" if r.p_yes >= partial else "no"


def old_label(r: Record, overrides: bool) -> str:
    if not overrides and r.old_method in ("identifier", "similarity"):
        return "no"  # what the model said before the override
    return r.old_grade or "ungraded"


def reliability(records: list[Record], bins: int = 10) -> tuple[list[tuple[str, int, float, float]], float]:
    scored = [r for r in records if r.p_yes is not None]
    rows, ece = [], 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        inside = [r for r in scored if lo <= r.p_yes < hi or (b == bins - 1 and r.p_yes == 1.0)]  # type: ignore[operator]
        if not inside:
            rows.append((f"{lo:.1f}-{hi:.1f}", 0, math.nan, math.nan))
            continue
        mean_p = sum(r.p_yes for r in inside) / len(inside)  # type: ignore[misc]
        observed = sum(r.relevant for r in inside) / len(inside)
        ece += len(inside) / len(scored) * abs(mean_p - observed)
        rows.append((f"{lo:.1f}-{hi:.1f}", len(inside), mean_p, observed))
    return rows, ece


def metrics(records: list[Record], labels: list[str]) -> dict[str, float]:
    rel = [r.relevant for r in records]
    kept = [g in ("yes", "partial", "ungraded") for g in labels]
    yes = [g == "yes" for g in labels]
    n_rel = sum(rel)
    tp_yes = sum(y and r for y, r in zip(yes, rel, strict=True))
    precision = tp_yes / sum(yes) if sum(yes) else math.nan
    recall_yes = tp_yes / n_rel if n_rel else math.nan
    return {
        "n": len(records), "relevant": n_rel,
        "acc_kept": sum(k == r for k, r in zip(kept, rel, strict=True)) / len(records),
        "acc_yes": sum(y == r for y, r in zip(yes, rel, strict=True)) / len(records),
        "recall": sum(k and r for k, r in zip(kept, rel, strict=True)) / n_rel if n_rel else math.nan,
        "rel_no": sum(g == "no" and r for g, r in zip(labels, rel, strict=True)) / n_rel if n_rel else math.nan,
        "irrel_kept": sum(k and not r for k, r in zip(kept, rel, strict=True)) / max(1, len(records) - n_rel),
        "yes_prec": precision, "yes_rec": recall_yes,
        "yes_f1": 2 * precision * recall_yes / (precision + recall_yes) if tp_yes else 0.0,
        "ungraded": sum(g == "ungraded" for g in labels),
    }  # fmt: skip


def fit(records: list[Record], floor: float | None) -> tuple[float, float]:
    """(partial, yes) on the passages the grader is asked about (above the floor, with a p(yes))."""
    asked = [r for r in records if r.p_yes is not None and not below_floor(r, floor)]
    candidates = sorted({round(r.p_yes, 4) for r in asked} | {i / 100 for i in range(101)})  # type: ignore[arg-type]
    relevant_p = sorted(r.p_yes for r in asked if r.relevant)  # type: ignore[type-var]
    partial = 0.0
    if relevant_p:
        keep = math.ceil(RECALL_TARGET * len(relevant_p))
        partial = max(c for c in candidates if sum(p >= c for p in relevant_p) >= keep)

    def f1(t: float) -> float:
        return metrics(asked, [new_label(r, (0.0, t), None) for r in asked])["yes_f1"]

    yes = max(candidates, key=lambda t: (f1(t), -t))
    return min(partial, yes), yes


def fmt(x: float) -> str:
    return "   -" if isinstance(x, float) and math.isnan(x) else f"{x:4.2f}"


def report(records: list[Record], timings: list[QuestionTiming], floor: float | None, have_old: bool) -> None:
    sets = {
        "dev": [r for r in records if r.dataset == "dev"],
        "scifact": [r for r in records if r.dataset == "scifact"],
    }
    sets = {k: v for k, v in sets.items() if v}
    sets["pooled"] = records
    for name, rs in sets.items():
        questions = len({r.question_id for r in rs})
        print(f"{name}: {questions} questions, {len(rs)} passages, {sum(r.relevant for r in rs)} relevant, "
              f"{sum(r.p_yes is None for r in rs)} without p(yes), {sum(below_floor(r, floor) for r in rs)} under "
              f"the floor ({sum(below_floor(r, floor) and r.relevant for r in rs)} of them relevant)")  # fmt: skip

    print("\nreliability of p(yes) (new grader, every passage, no floor): count, mean p(yes), observed relevant share")
    curves = {name: reliability(rs) for name, rs in sets.items()}
    print(f"{'p(yes)':9}" + "".join(f" | {name:^22}" for name in curves))
    for i, (band, *_rest) in enumerate(next(iter(curves.values()))[0]):
        cells = []
        for rows, _ in curves.values():
            _, n, mean_p, observed = rows[i]
            cells.append(f" | {n:5} {fmt(mean_p):>7} {fmt(observed):>8}")
        print(f"{band:9}" + "".join(cells))
    print(f"{'ECE':9}" + "".join(f" | {ece:^22.3f}" for _, ece in curves.values()))

    pooled_fit = fit(records, floor)
    print(f"\nfitted on pooled (in-sample): partial >= {pooled_fit[0]:.3f} (highest keeping >= {RECALL_TARGET:.0%} of "
          f"the relevant passages asked), yes >= {pooled_fit[1]:.3f} (max F1 of yes)")  # fmt: skip
    cross = {}
    if "dev" in sets and "scifact" in sets:
        cross = {"dev": fit(sets["scifact"], floor), "scifact": fit(sets["dev"], floor)}
        print(f"fitted on dev alone: {fit(sets['dev'], floor)}; on SciFact alone: {fit(sets['scifact'], floor)}")

    timing = {name: [t for t in timings if name == "pooled" or t.dataset == name] for name in sets}
    print(f"\n{'grader':42} {'data':8} {'n':>4} {'rel':>4} {'acc':>5} {'acc_y':>5} {'recall':>6} {'rel>no':>6} "
          f"{'irr>kept':>8} {'yes_p':>5} {'yes_r':>5} {'ungr':>4} {'s/question':>10}")  # fmt: skip

    def row(label: str, name: str, rs: list[Record], labels: list[str], seconds: str) -> None:
        m = metrics(rs, labels)
        print(f"{label:42} {name:8} {m['n']:4} {m['relevant']:4} {fmt(m['acc_kept']):>5} {fmt(m['acc_yes']):>5} "
              f"{fmt(m['recall']):>6} {fmt(m['rel_no']):>6} {fmt(m['irrel_kept']):>8} {fmt(m['yes_prec']):>5} "
              f"{fmt(m['yes_rec']):>5} {m['ungraded']:4} {seconds:>10}")  # fmt: skip

    for name, rs in sets.items():
        questions = len({r.question_id for r in rs}) or 1
        asked_s = sum(r.new_s for r in rs if not below_floor(r, floor)) / questions
        all_s = sum(r.new_s for r in rs) / questions
        row(f"new p(yes) {pooled_fit[0]:.2f}/{pooled_fit[1]:.2f} + floor (in-sample)", name, rs,
            [new_label(r, pooled_fit, floor) for r in rs], f"{asked_s:.1f}")  # fmt: skip
        row("new p(yes), same thresholds, no floor", name, rs, [new_label(r, pooled_fit, None) for r in rs],
            f"{all_s:.1f}")  # fmt: skip
        if name in cross:
            row(f"new, cross-fitted {cross[name][0]:.2f}/{cross[name][1]:.2f} + floor", name, rs,
                [new_label(r, cross[name], floor) for r in rs], "")  # fmt: skip
        if have_old:
            old_times = [t.old_s for t in timing[name] if t.old_s is not None]
            old_s = f"{sum(old_times) / len(old_times):.1f}" if old_times else "-"
            row("old JSON + overrides (as in the workflow)", name, rs, [old_label(r, True) for r in rs], old_s)
            row("old JSON only (overrides reverted)", name, rs, [old_label(r, False) for r in rs], old_s)
    print("\nacc: kept (yes/partial/ungraded) vs relevant; acc_y: yes vs relevant; recall: relevant passages kept; "
          "rel>no: relevant passages graded no; irr>kept: irrelevant passages kept; s/question: grading LLM time "
          "(new: the passages above the floor, asked one by one; no floor: all of them)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", type=Path, default=SHARED / "scenarios-dev", help="folder with scenarios.yaml")
    parser.add_argument("--scifact", type=int, default=50, help="SciFact test claims (0 = skip SciFact)")
    parser.add_argument("--distractors", type=int, default=10, help="lexically close abstracts ingested per claim")
    parser.add_argument("--dev-limit", type=int, default=None, help="only the first N dev cases")
    parser.add_argument("--no-old", action="store_true", help="skip the old grader")
    parser.add_argument("--save", type=Path, default=None, help="write the per-passage records here (JSON)")
    parser.add_argument("--load", type=Path, default=None, help="print the figures of saved records, grade nothing")
    args = parser.parse_args()
    floor = load_settings(None).workflow.grade_floor_for("all-MiniLM-L6-v2-onnx-int8")
    if args.load:
        saved = json.loads(args.load.read_text())
        records = [Record(**r) for r in saved["records"]]
        timings = [QuestionTiming(**t) for t in saved["timings"]]
        report(records, timings, floor, any(r.old_grade is not None for r in records))
        return
    ref = subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=REPO, check=True, capture_output=True,
                         text=True).stdout.strip()  # fmt: skip
    old_grader = None if args.no_old else old_grader_class(ref)
    server_dir = temp_data_dir("erag-bench-grading-")
    server = start_embedded(server_dir)
    records: list[Record] = []
    timings: list[QuestionTiming] = []
    try:
        for name, make in (("dev", "bench_grading_dev"), ("scifact", "bench_grading_scifact")):
            if name == "scifact" and not args.scifact:
                continue
            rag = fresh_rag(server, make, server_dir / "data")
            floor = rag.settings.workflow.grade_floor_for(rag.providers.embed_model.model_name)
            cfg = rag.settings.workflow
            callers = {k: LLMCaller({"grader": rag.providers.grader}, timeout_s=cfg.llm_timeout_s,
                                    max_retries=cfg.llm_max_retries, backoff_s=cfg.llm_backoff_s)
                       for k in ("new", "old")}  # fmt: skip
            rag.providers.grader.complete("Say OK.", max_tokens=2)  # load the model before timing
            if name == "dev":
                questions = dev_questions(rag, args.suite)
                if args.dev_limit:
                    questions = (q for i, q in enumerate(questions) if i < args.dev_limit)
            else:
                questions = scifact_questions(rag, args.scifact, args.distractors)
            got, timed = grade_all(rag, name, questions, old_grader, callers)
            records += got
            timings += timed
            for k, c in callers.items():
                s = c.stats
                print(f"{name} {k} grader: {s.calls} calls, {s.prompt_tokens} prompt + {s.completion_tokens} "
                      f"completion tokens, {s.failures} failed attempts", flush=True)  # fmt: skip
            rag.close()
    finally:
        stop_embedded(server_dir)
    if args.save:
        args.save.write_text(json.dumps({"old_ref": ref, "records": [asdict(r) for r in records],
                                         "timings": [asdict(t) for t in timings]}))  # fmt: skip
    print(f"\nold grader: {ref[:10]} (git merge-base HEAD main)")
    report(records, timings, floor, old_grader is not None)


if __name__ == "__main__":
    main()
