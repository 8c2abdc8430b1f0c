"""Retrieval evaluation: metrics checked by hand, loaders, the harness and the plot."""

from __future__ import annotations

import doctest
import json
import logging
import math
import random
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import enterprise_rag.evaluation as evaluation_package
from enterprise_rag import MissingExtraError, Principal
from enterprise_rag.evaluation import (
    EvalDataError,
    EvalSet,
    compare_table,
    evaluate,
    evaluate_as_users,
    evaluate_scopes,
    iter_beir_corpus,
    load_beir,
    load_labelled_yaml,
    mrr,
    ndcg_at_k,
    plot_recall_curve,
    precision_at_k,
    recall_at_k,
)
from enterprise_rag.evaluation import metrics as metrics_module
from enterprise_rag.evaluation import runner as runner_module
from tests.conftest import SCIFACT

L3 = math.log2(3)  # discount of rank 2


# ---- metrics -------------------------------------------------------------------------------


def test_docstring_examples() -> None:
    for module in (metrics_module, evaluation_package):
        assert doctest.testmod(module).failed == 0


def test_perfect_ranking_scores_one() -> None:
    ranked, rel = ["a", "b", "c"], {"a": 3, "b": 2, "c": 1}
    assert recall_at_k(ranked, rel, 3) == 1.0
    assert precision_at_k(ranked, rel, 3) == 1.0
    assert mrr(ranked, rel) == 1.0
    assert ndcg_at_k(ranked, rel, 3) == pytest.approx(1.0)
    assert ndcg_at_k(ranked, rel, 3, gain="linear") == pytest.approx(1.0)


@pytest.mark.parametrize("ranked", [["x", "y", "z"], []])
def test_no_hits_scores_zero(ranked: list[str]) -> None:
    rel = {"a": 1, "b": 2}
    for value in (
        recall_at_k(ranked, rel, 3),
        precision_at_k(ranked, rel, 3),
        mrr(ranked, rel),
        ndcg_at_k(ranked, rel, 3),
    ):
        assert value == 0.0


def test_non_positive_grades_are_not_relevant() -> None:
    rel = {"a": 0, "b": -1}
    assert recall_at_k(["a", "b"], rel, 2) == 0.0
    assert ndcg_at_k(["a", "b"], rel, 2) == 0.0
    assert mrr(["a", "b"], rel) == 0.0
    # a judged-non-relevant doc in the qrels does not enter the ideal ranking
    assert ndcg_at_k(["c"], {"c": 1, "a": 0}, 5) == 1.0


def test_graded_ndcg_by_hand() -> None:
    ranked = ["d1", "d2", "d3", "d4"]
    rel = {"d1": 1, "d2": 0, "d3": 3, "d5": 2}
    # exponential gain 2^rel - 1, discount log2(rank + 1):
    #   DCG@4  = 1/log2(2) + 0 + 7/log2(4) + 0       = 1 + 3.5               = 4.5
    #   IDCG@4 = grades 3,2,1: 7/1 + 3/log2(3) + 1/2 = 7 + 1.8928 + 0.5       = 9.3928
    #   nDCG@4 = 4.5 / 9.3928                                                  = 0.47909
    assert ndcg_at_k(ranked, rel, 4, gain="exponential") == pytest.approx(0.47909, abs=1e-5)
    # cut at 2: DCG = 1, IDCG = 7 + 3/log2(3) = 8.8928 -> 0.11245
    assert ndcg_at_k(ranked, rel, 2, gain="exponential") == pytest.approx(0.11245, abs=1e-5)
    # linear gain (trec_eval): DCG = 1 + 3/2 = 2.5, IDCG = 3 + 2/log2(3) + 1/2 = 4.76186 -> 0.52500
    assert ndcg_at_k(ranked, rel, 4, gain="linear") == pytest.approx(0.52500, abs=1e-5)
    # recall counts d1, d3 of {d1, d3, d5}; precision 2 of 4 slots; first hit at rank 1
    assert recall_at_k(ranked, rel, 4) == pytest.approx(2 / 3)
    assert precision_at_k(ranked, rel, 4) == 0.5
    assert mrr(ranked, rel) == 1.0


def test_duplicates_count_once_at_first_occurrence() -> None:
    ranked = ["x", "a", "x", "a", "b"]  # deduplicated: x, a, b
    rel = {"a": 1, "b": 1}
    assert recall_at_k(ranked, rel, 3) == 1.0  # b moves up to rank 3
    assert precision_at_k(ranked, rel, 3) == pytest.approx(2 / 3)
    assert mrr(ranked, rel) == 0.5
    # (1/log2(3) + 1/log2(4)) / (1 + 1/log2(3)) = 1.13093 / 1.63093 = 0.69343
    assert ndcg_at_k(ranked, rel, 3) == pytest.approx(0.69343, abs=1e-5)


def test_k_larger_than_the_list() -> None:
    ranked, rel = ["a"], {"a": 1, "b": 1}
    assert recall_at_k(ranked, rel, 100) == 0.5
    assert precision_at_k(ranked, rel, 100) == 0.01  # divides by k, not by what came back
    assert mrr(ranked, rel, k=100) == 1.0
    assert ndcg_at_k(ranked, rel, 100) == pytest.approx(1 / (1 + 1 / L3))  # 0.61315


def test_mrr_cutoff() -> None:
    assert mrr(["x", "y", "a"], {"a": 1}) == pytest.approx(1 / 3)
    assert mrr(["x", "y", "a"], {"a": 1}, k=3) == pytest.approx(1 / 3)
    assert mrr(["x", "y", "a"], {"a": 1}, k=2) == 0.0


@pytest.mark.parametrize("k", [0, -1, True, 2.5])
def test_bad_k_is_refused(k: object) -> None:
    with pytest.raises(ValueError):
        recall_at_k(["a"], {"a": 1}, k)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ndcg_at_k(["a"], {"a": 1}, k)  # type: ignore[arg-type]


def _reference_ndcg(ranked: list[str], qrels: dict[str, int], k: int, exponential: bool) -> float:
    """Straightforward nDCG written separately from the library, for cross-checking."""
    distinct: list[str] = []
    for doc in ranked:
        if doc not in distinct:
            distinct.append(doc)
    gain = (lambda r: 2.0**r - 1.0) if exponential else float
    dcg = 0.0
    for position in range(min(k, len(distinct))):
        grade = qrels.get(distinct[position], 0)
        if grade > 0:
            dcg += gain(grade) / math.log(position + 2, 2)
    ideal = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    idcg = sum(gain(g) / math.log(p + 2, 2) for p, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def test_ndcg_matches_reference_on_random_cases() -> None:
    rng = random.Random(20240611)
    docs = [f"d{i}" for i in range(30)]
    for _ in range(300):
        qrels = {d: rng.choice([-1, 0, 1, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 8))}
        ranked = [rng.choice(docs) for _ in range(rng.randint(0, 25))]  # duplicates likely
        k = rng.choice([1, 3, 5, 10, 20, 100])
        for exponential in (True, False):
            expected = _reference_ndcg(ranked, qrels, k, exponential)
            got = ndcg_at_k(ranked, qrels, k, gain="exponential" if exponential else "linear")
            assert got == pytest.approx(expected, abs=1e-12)
            assert 0.0 <= got <= 1.0 + 1e-12


# ---- loaders -------------------------------------------------------------------------------


@pytest.mark.skipif(not (SCIFACT / "qrels" / "test.tsv").is_file(), reason="SciFact not in ../shared/data")
def test_load_beir_scifact() -> None:
    evalset = load_beir(SCIFACT)
    assert len(evalset) == 300
    assert evalset.judgments == 339
    assert evalset.dropped_queries == ()
    assert evalset.queries["1"] == "0-dimensional biomaterials show inductive properties."
    assert evalset.qrels["1"] == {"31715818": 1}
    assert max(len(docs) for docs in evalset.qrels.values()) == 5
    assert evalset.corpus_path == SCIFACT / "corpus.jsonl"
    corpus_ids = {record.doc_id for record in iter_beir_corpus(SCIFACT)}
    assert len(corpus_ids) == 5183
    assert all(doc in corpus_ids for docs in evalset.qrels.values() for doc in docs)


def _write_beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    corpus = [
        {"_id": "d1", "title": "Refunds", "text": "Within 30 days.", "metadata": {"lang": "en"}},
        {"_id": "d2", "title": "", "text": "Shipping."},
        {"_id": 3, "text": "No title field."},
    ]
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(c) for c in corpus) + "\n\n")
    queries = [{"_id": q, "text": f"question {q}"} for q in ("q1", "q2", "q3", "q4")]
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t0\nq2\t3\t1\nq4\td2\t0\nq9\td1\t1\n"
    )
    return root


def test_load_beir_small_folder(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = _write_beir(tmp_path / "tiny")
    with caplog.at_level(logging.INFO, logger="enterprise_rag.evaluation.dataset"):
        evalset = load_beir(root)
    assert evalset.queries == {"q1": "question q1", "q2": "question q2"}
    assert evalset.qrels == {"q1": {"d1": 2, "d2": 0}, "q2": {"3": 1}}
    assert evalset.judgments == 3
    assert evalset.dropped_queries == ("q3", "q4")  # q3 unjudged, q4 only judged non-relevant
    assert "dropped 2 queries" in caplog.text
    assert "1 unknown queries" in caplog.text
    records = list(iter_beir_corpus(root))
    assert [r.doc_id for r in records] == ["d1", "d2", "3"]
    assert records[0].title == "Refunds" and records[0].metadata == {"lang": "en"}
    assert records[2].title == ""
    assert evalset.subset(["q2"]).queries == {"q2": "question q2"}


def test_load_beir_split_files_and_errors(tmp_path: Path) -> None:
    root = _write_beir(tmp_path / "tiny")
    (root / "queries.dev.jsonl").write_text(json.dumps({"_id": "q1", "text": "dev wording"}) + "\n")
    (root / "qrels" / "dev.tsv").write_text("q1\td1\t1\n")  # no header line
    dev = load_beir(root, split="dev")
    assert dev.queries == {"q1": "dev wording"} and dev.qrels == {"q1": {"d1": 1}}
    with pytest.raises(FileNotFoundError, match="available: \\['dev', 'test'\\]"):
        load_beir(root, split="train")
    with pytest.raises(FileNotFoundError):
        load_beir(tmp_path / "nowhere")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\thigh\n")
    with pytest.raises(EvalDataError, match="test.tsv:2"):
        load_beir(root)
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "ok"}\n{oops\n')
    with pytest.raises(EvalDataError, match="queries.jsonl:2"):
        load_beir(root)


def test_load_labelled_yaml(tmp_path: Path) -> None:
    path = tmp_path / "labelled.yaml"
    path.write_text(
        """
questions:
  - id: refund
    question: How long is the refund window?
    relevant: [policies/refunds.md, faq.md]
    user: {user_id: dana, groups: [support, all-staff]}
  - id: 7
    question: Which error code means the disk is full?
    relevant: {errors/E1042.md: 2, errors/E1024.md: 0}
  - id: unanswerable
    question: What is the CEO's shoe size?
    relevant: []
"""
    )
    evalset = load_labelled_yaml(path)
    assert evalset.queries == {
        "refund": "How long is the refund window?",
        "7": "Which error code means the disk is full?",
    }
    assert evalset.qrels["refund"] == {"policies/refunds.md": 1, "faq.md": 1}
    assert evalset.qrels["7"] == {"errors/E1042.md": 2, "errors/E1024.md": 0}
    assert evalset.users == {"refund": Principal(user_id="dana", groups=["support", "all-staff"])}
    assert evalset.dropped_queries == ("unanswerable",)
    assert evalset.name == "labelled"


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("- just a list\n", "top-level 'questions:'"),
        ("questions:\n  - {id: a, relevant: [x]}\n", "non-empty 'question'"),
        ("questions:\n  - {id: a, question: q, relevant: [x]}\n  - {id: a, question: r}\n", "duplicate id"),
        ("questions:\n  - {id: a, question: q, relevant: {x: high}}\n", "must be an integer"),
        ("questions:\n  - {id: a, question: q, user: {groups: [hr]}}\n", "user_id"),
        ("questions: [\n", "not valid YAML"),
    ],
)
def test_load_labelled_yaml_errors(tmp_path: Path, body: str, match: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(EvalDataError, match=match):
        load_labelled_yaml(path)


# ---- harness -------------------------------------------------------------------------------


@pytest.fixture
def tiny() -> EvalSet:
    return EvalSet(
        queries={"q1": "one", "q2": "two", "q3": "three"},
        qrels={"q1": {"a": 1}, "q2": {"b": 1, "c": 1}, "q3": {"d": 2, "e": 1}},
    )


ANSWERS = {"one": ["a", "x"], "two": ["x", "b", "b", "y", "c"], "three": ["z"]}
LATENCY_MS = {"one": 10.0, "two": 20.0, "three": 40.0}


def test_evaluate_known_numbers(tiny: EvalSet, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(runner_module, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    def retrieve(question: str) -> list[str]:
        clock[0] += LATENCY_MS[question] / 1000.0
        return ANSWERS[question]

    report = evaluate(retrieve, tiny, ks=(1, 3, 5))
    m = report.metrics
    # q1 [a,x]: all hits at rank 1.  q2 [x,b,y,c] (deduplicated): b at 2, c at 4.  q3: nothing.
    assert m["recall@1"] == pytest.approx(1 / 3)  # (1 + 0 + 0) / 3
    assert m["recall@3"] == pytest.approx(0.5)  # (1 + 1/2 + 0) / 3
    assert m["recall@5"] == pytest.approx(2 / 3)  # (1 + 1 + 0) / 3
    assert m["precision@5"] == pytest.approx(0.2)  # (1/5 + 2/5 + 0) / 3
    assert m["mrr@10"] == pytest.approx(0.5)  # (1 + 1/2 + 0) / 3
    # q2 ndcg@3 = (1/log2 3) / (1 + 1/log2 3) = 0.38685; ndcg@10 = (1/log2 3 + 1/log2 5) / (1 + 1/log2 3) = 0.65092
    assert m["ndcg@3"] == pytest.approx((1 + 0.38685) / 3, abs=1e-5)
    assert m["ndcg@10"] == pytest.approx((1 + 0.65092) / 3, abs=1e-5)
    assert set(m) == {f"{name}@{k}" for name in ("recall", "precision", "ndcg") for k in (1, 3, 5)} | {
        "ndcg@10",
        "mrr@10",
    }
    assert report.num_queries == 3
    assert report.per_query[1].retrieved == ("x", "b", "y", "c")
    assert report.per_query[1].num_relevant == 2
    assert [row.latency_ms for row in report.per_query] == pytest.approx([10.0, 20.0, 40.0])
    assert report.latency_p50_ms == pytest.approx(20.0)
    assert report.latency_p95_ms == pytest.approx(38.0)  # linear interpolation between 20 and 40
    curve = report.recall_curve()
    assert [k for k, _ in curve] == [1, 3, 5]
    assert [r for _, r in curve] == pytest.approx([1 / 3, 0.5, 2 / 3])
    table = report.to_table()
    assert table[0] == {"metric": "queries", "value": 3}
    assert {"metric": "latency_p95_ms", "value": pytest.approx(38.0)} in table
    payload = json.loads(json.dumps(report.to_dict()))
    assert payload["num_queries"] == 3 and payload["per_query"][2]["metrics"]["recall@5"] == 0.0


def test_evaluate_linear_gain_and_progress(tiny: EvalSet) -> None:
    calls: list[tuple[int, int]] = []
    report = evaluate(
        lambda q: ["e", "d"],
        tiny.subset(["q3"]),
        ks=(2,),
        ndcg_gain="linear",
        progress=lambda done, total: calls.append((done, total)),
    )
    # linear: DCG = 1 + 2/log2 3, IDCG = 2 + 1/log2 3
    assert report.metrics["ndcg@2"] == pytest.approx((1 + 2 / L3) / (2 + 1 / L3))
    assert calls == [(1, 1)]


def test_evaluate_refuses_bad_input(tiny: EvalSet, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(TypeError, match="document id strings"):
        evaluate(lambda q: [1, 2], tiny)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="sequence of doc ids"):
        evaluate(lambda q: "a", tiny)
    with pytest.raises(ValueError, match="ks"):
        evaluate(lambda q: [], tiny, ks=(0,))
    with pytest.raises(ValueError, match="no judged queries"):
        evaluate(lambda q: [], EvalSet(queries={"q": "x"}, qrels={}))

    def broken(question: str) -> list[str]:
        raise RuntimeError("store down")

    with pytest.raises(RuntimeError) as info:
        evaluate(broken, tiny)
    assert any("q1" in note for note in info.value.__notes__)
    with caplog.at_level(logging.WARNING, logger="enterprise_rag.evaluation.runner"):
        evaluate(lambda q: ["nope"], tiny)
    assert "no retrieved id matched" in caplog.text


def _scoped_retriever(principal: Principal):  # type: ignore[no-untyped-def]
    hidden = set() if "hr" in principal.groups else {"b", "c"}
    return lambda question: [d for d in ANSWERS[question] if d not in hidden]


def test_evaluate_scopes(tiny: EvalSet) -> None:
    principals = {"hr": Principal("dana", ["hr"]), "eng": Principal("eli", ["eng"])}
    reports = evaluate_scopes(_scoped_retriever, tiny, principals, ks=(5,))
    assert list(reports) == ["hr", "eng"]
    assert reports["hr"].metrics["recall@5"] == pytest.approx(2 / 3)
    assert reports["eng"].metrics["recall@5"] == pytest.approx(1 / 3)  # b and c are hidden from eng
    assert reports["eng"].name == "eng"
    rows = {row["metric"]: row for row in compare_table(reports)}
    assert rows["recall@5"]["hr"] == pytest.approx(2 / 3) and rows["queries"]["eng"] == 3


def test_evaluate_as_users(tiny: EvalSet) -> None:
    made: list[Principal] = []

    def make(principal: Principal):  # type: ignore[no-untyped-def]
        made.append(principal)
        return _scoped_retriever(principal)

    tiny.users = {"q1": Principal("eli", ["eng"]), "q2": Principal("eli", ["eng"])}
    with pytest.raises(ValueError, match="default=Principal"):
        evaluate_as_users(make, tiny)
    report = evaluate_as_users(make, tiny, ks=(5,), default=Principal("dana", ["hr"]))
    assert [r.retrieved for r in report.per_query] == [("a", "x"), ("x", "y"), ("z",)]
    assert made == [Principal("eli", ["eng"]), Principal("dana", ["hr"])]  # one retriever per principal


def test_plot_recall_curve_writes_png(tiny: EvalSet, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    reports = evaluate_scopes(
        _scoped_retriever, tiny, {"hr": Principal("d", ["hr"]), "eng": Principal("e")}, ks=(1, 3, 5, 10, 100)
    )
    out = plot_recall_curve(reports, tmp_path / "plots" / "recall.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 1000


def test_plot_without_matplotlib_names_the_extra(
    tiny: EvalSet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    report = evaluate(lambda q: ANSWERS[q], tiny)
    with pytest.raises(MissingExtraError, match=r"pip install 'enterprise-rag\[notebooks\]'"):
        plot_recall_curve({"run": report}, tmp_path / "x.png")
