"""Evidence grading from the grader model's probability of "yes" for each quoted unit, over generation's prefix.

The grader runs on the real embedded PostgreSQL (its grade cache); only the
grader LLM is a :class:`ScriptedLLM` that records each prompt and returns
first-token probabilities the way the local engine does
(``choices[0].logprobs.content[0].top_logprobs``). What a long passage shows of
itself in a short window (what the LLM reranker reads) is tested
here too.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from enterprise_rag import EnterpriseRAG
from enterprise_rag.answer.checks.candidates import Evidence
from enterprise_rag.answer.checks.grading import Grade, Grader, label
from enterprise_rag.config import FITTED_GRADE_THRESHOLDS, WorkflowSettings, load_settings
from enterprise_rag.errors import LLMError
from enterprise_rag.llm import prompts, untrusted
from enterprise_rag.llm.caller import LLMCaller, top_logprobs_of, yes_share
from enterprise_rag.retrieval.windows import focus
from enterprise_rag.schema.sources import Source
from enterprise_rag.schema.spans import number_spans
from enterprise_rag.testing import ScriptedLLM, TokenProbabilities, yes_probability
from tests.support.workflow import ALICE, DOCS, llms, passage_in, write_docs
from tests.support.workflow import QUESTION as VACATION_QUESTION

QUESTION = "Above what amount do I need to attach an itemised receipt to an expense claim?"
ANSWER = "An itemised receipt is required for any single cost over $25; smaller costs need a short description."
# A merged parent of several sections, longer than the windows below.
PARENT = "\n\n".join(
    [
        "## 1. Overview\nThis policy explains what can be claimed, the evidence we need, and the deadlines for "
        "submitting a claim. Spend the company's money as carefully as you would spend your own.",
        "## 2. Submitting a claim\nEvery claim is submitted in the Ledgerly expense app, either on the web or on "
        "a phone. Paper claim forms are no longer accepted, and a claim needs a cost centre.",
        "### 2.2 Deadline\nClaims must be submitted within 60 days of the date the cost was incurred. Late "
        "submissions are limited to two per employee per calendar year.",
        f"### 2.3 Receipts\n{ANSWER}",
        "A card slip that only shows the total is not an itemised receipt.",
        "## 3. Travel\nTrips over $500 are pre-approved by your manager before anything is booked.",
    ]
)


def test_focus_returns_short_text_whole_and_long_text_within_the_limit() -> None:
    assert focus(QUESTION, "short", 100) == "short"
    assert len(focus(QUESTION, PARENT, 300)) <= 300


def grader_with(rag: EnterpriseRAG, handler: Any, **kwargs: Any) -> tuple[Grader, ScriptedLLM]:
    llm = ScriptedLLM({"grade": handler}, model_name=kwargs.pop("model_name", "scripted"))
    caller = LLMCaller({"grader": llm}, max_retries=kwargs.pop("max_retries", 0), backoff_s=0.0)
    options = {"thresholds": (0.2, 0.6), "floor": None, **kwargs}
    return Grader(rag.db, caller, **options), llm


def sources_of(passages: dict[str, str], breadcrumb: str = "") -> list[Source]:
    """Numbered corpus sources whose node ids are the keys of ``passages``."""
    return [Source(label=f"S{i}", text=text, source=f"docs/{key}.md", page=None, title=breadcrumb,
                   breadcrumb=breadcrumb, effective_date=None, status="current", document_id=key, node_id=key)
            for i, (key, text) in enumerate(passages.items(), 1)]  # fmt: skip


def units_of(sources: list[Source]) -> list[Evidence]:
    """One unit per span of ``sources``."""
    return [Evidence((span,)) for span in number_spans([(x.label, x.text) for x in sources])]


def grade(grader: Grader, question: str, sources: list[Source]) -> list[Grade]:
    return grader.grade_units(question, sources, units_of(sources))


def nodes_of(passages: dict[str, str], **metadata: Any) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(id_=k, text=v, metadata=dict(metadata)), score=1.0)
            for k, v in passages.items()]  # fmt: skip


# ---- p(yes) and the thresholds -----------------------------------------------------------------------------
def test_p_yes_sums_every_spelling_of_yes_and_no_among_the_top_tokens() -> None:
    top = [("Yes", math.log(0.5)), ("No", math.log(0.2)), (" yes", math.log(0.1)), ("YES", math.log(0.1)),
           ("no", math.log(0.05)), ("The", math.log(0.05))]  # fmt: skip
    assert yes_share(top) == pytest.approx(0.7 / 0.95)
    assert yes_share([("yes", 0.0)]) == 1.0 and yes_share([("No", -0.1)]) == 0.0
    assert yes_share([("Maybe", -0.1), ("The", -2.0)]) is None and yes_share([]) is None


def test_top_logprobs_are_read_from_the_local_dict_and_absent_logprobs_are_none() -> None:
    raw = {"choices": [{"logprobs": {"content": [{"token": "No", "logprob": -0.1,
                                                  "top_logprobs": [{"token": "No", "logprob": -0.1}]}]}}]}  # fmt: skip
    assert top_logprobs_of(raw) == [("No", -0.1)]
    assert top_logprobs_of({"choices": [{"logprobs": None}]}) is None
    assert top_logprobs_of({"usage": {}}) is None and top_logprobs_of(None) is None


def test_thresholds_map_p_yes_to_yes_partial_and_no() -> None:
    assert [label(p, (0.2, 0.6)) for p in (0.0, 0.19, 0.2, 0.59, 0.6, 1.0)] == [
        "no", "no", "partial", "partial", "yes", "yes",
    ]  # fmt: skip


def test_a_grade_carries_its_probability_as_confidence(rag: EnterpriseRAG) -> None:
    grader, llm = grader_with(rag, yes_probability(0.83))
    (graded,) = grade(grader, QUESTION, sources_of({"a": "Receipts over $25 are itemised."}))
    assert graded == Grade("Receipts over $25 are itemised.", "yes", "p(yes)=0.83", pytest.approx(0.83), "llm")
    task = llm.calls[0][1][-1].content
    assert QUESTION in task and "Receipts over $25 are itemised." in task  # the unit is quoted in the task
    assert "<<<" not in task  # the sources are in the prefix, not here


def test_every_grade_call_starts_with_the_generation_prefix_and_quotes_its_unit(rag: EnterpriseRAG) -> None:
    """Grading, generation and the judge share one byte-identical system message: the sources are read once."""
    sources = sources_of({"a": "First passage.", "b": "Second passage."})
    grader, llm = grader_with(rag, yes_probability(0.5))
    grade(grader, QUESTION, sources)
    generation_prefix = prompts.answer_messages(sources, QUESTION, [])[0].content
    assert [messages[0].content for _, messages in llm.calls] == [generation_prefix] * 2
    assert [prompts.graded_line(messages) for _, messages in llm.calls] == ["First passage.", "Second passage."]


def test_a_passage_takes_the_grade_of_its_best_unit_and_one_never_asked_about_is_no(rag: EnterpriseRAG) -> None:
    sources = sources_of({"a": "Receipts over $25 are itemised. Parking is free.", "b": "Lunch is at noon."})
    grader, _ = grader_with(rag, lambda m, k: yes_probability(0.9 if "$25" in passage_in(m) else 0.1))
    units = units_of(sources)[:2]  # the units of source a only
    graded = grader.grade_units(QUESTION, sources, units)
    passages = grader.passage_grades(sources, units, graded)
    assert [(g.node_id, g.grade, g.method) for g in passages] == [("a", "yes", "llm"), ("b", "no", "unasked")]


def test_web_sources_are_graded_as_evidence_but_have_no_passage_grade(rag: EnterpriseRAG) -> None:
    web = Source(label="S2", text="A web page.", source="https://example.com", page=None, title="Web",
                 breadcrumb="Web", effective_date=None, status="current", document_id="w", kind="web")  # fmt: skip
    sources = [*sources_of({"a": "Receipts over $25 are itemised."}), web]
    grader, llm = grader_with(rag, yes_probability(0.9))
    graded = grade(grader, QUESTION, sources)
    assert len(graded) == 2 and len(llm.calls) == 2
    assert [g.node_id for g in grader.passage_grades(sources, units_of(sources), graded)] == ["a"]


# ---- nothing overrules the grader ----------------------------------------------------------------------------
def test_an_all_caps_question_gets_the_same_grades(rag: EnterpriseRAG) -> None:
    """The same passages with the same model probabilities get the same grades whatever the question's case:
    its words in capitals (read as acronyms by a heading rule) change nothing."""
    passages = {
        "titled": "## 2. Installing the client\nOpen the Company Portal and install SecureLink.",
        "other": "## SSO sign-in\nUse your single sign-on password.",
        "body": "## Working abroad\nSome countries block the VPN; ask the Service Desk first.",
    }
    p = {"titled": 0.1, "other": 0.02, "body": 0.4}
    grader, llm = grader_with(
        rag, lambda m, k: yes_probability(next(v for key, v in p.items() if passages[key] in passage_in(m)))
    )
    question = "How do I set up the VPN on my new laptop?"
    sources = sources_of(passages, breadcrumb="VPN Setup Guide")
    spans = number_spans([(y.label, y.text) for y in sources])
    units = [Evidence(tuple(x for x in spans if x.label == y.label)) for y in sources]  # one unit per passage
    lower = grader.grade_units(question, sources, units)
    upper = grader.grade_units(question.upper(), sources, units)
    assert [(g.grade, g.method) for g in lower] == [("no", "llm"), ("no", "llm"), ("partial", "llm")]
    assert [(g.grade, g.confidence, g.method) for g in upper] == [(g.grade, g.confidence, g.method) for g in lower]
    assert len(llm.calls) == 6  # both were asked: the capitals question is not served from the cache


def test_a_no_on_a_passage_headed_by_the_questions_identifier_stays_no(rag: EnterpriseRAG) -> None:
    question = "What should I tell a customer who sees E-4120 when sending a payment?"
    passages = {
        "named": "## E-4120 - Daily transfer limit exceeded\nThe fix is a temporary limit increase with form LD-7.",
        "crumb": "**Fix.** Ask the customer to wait for the daily limit to reset.",
    }
    sources = sources_of(passages)
    sources[1] = replace(sources[1], breadcrumb="Error Codes > E-4120 - Daily transfer limit exceeded")
    grader, _ = grader_with(rag, yes_probability(0.03))
    grades = grade(grader, question, sources)
    assert [(g.grade, g.method, g.reason) for g in grades] == [("no", "llm", "p(yes)=0.03")] * 3


def test_the_floor_rejects_without_a_call_and_none_means_no_floor(rag: EnterpriseRAG) -> None:
    passages = {"weak": "Parking permits are renewed in January.", "strong": "Receipts over $25 are itemised."}
    nodes = nodes_of(passages)
    nodes[0].node.metadata["similarity"], nodes[1].node.metadata["similarity"] = 0.05, 0.6
    floored, llm = grader_with(rag, yes_probability(0.9), floor=0.12)
    rejected, rest = floored.under_floor(nodes)
    assert [(g.node_id, g.grade, g.method) for g in rejected] == [("weak", "no", "floor")]
    assert [n.node.node_id for n in rest] == ["strong"] and llm.calls == []
    unfloored, _ = grader_with(rag, yes_probability(0.9), floor=None)
    assert unfloored.under_floor(nodes) == ([], nodes)


# ---- the cache -----------------------------------------------------------------------------------------------
def test_cached_probabilities_are_labelled_with_the_current_thresholds(rag: EnterpriseRAG) -> None:
    sources = sources_of({"a": "Receipts over $25 are itemised."})
    first, _ = grader_with(rag, yes_probability(0.5), thresholds=(0.2, 0.4))
    assert grade(first, QUESTION, sources)[0].grade == "yes"
    second, llm = grader_with(rag, yes_probability(0.99), thresholds=(0.2, 0.6))
    (graded,) = grade(second, QUESTION, sources)
    assert (graded.grade, graded.method, graded.confidence) == ("partial", "cache", 0.5) and llm.calls == []


def test_the_cache_outlives_the_process_key_of_the_data_block_ids(rag: EnterpriseRAG, monkeypatch: Any) -> None:
    """The grade prompt's block id changes with each process's random key; the cache key must not."""
    sources = sources_of({"a": "Receipts over $25 are itemised."})
    first, _ = grader_with(rag, yes_probability(0.9))
    grade(first, QUESTION, sources)
    monkeypatch.setattr(untrusted, "_KEY", b"another process")
    second, llm = grader_with(rag, yes_probability(0.1))
    assert grade(second, QUESTION, sources)[0].method == "cache" and llm.calls == []


# ---- fail-open -----------------------------------------------------------------------------------------------
def test_a_reply_without_yes_or_no_among_its_top_tokens_is_ungraded_and_not_cached(rag: EnterpriseRAG) -> None:
    grader, llm = grader_with(rag, TokenProbabilities({"Maybe": 0.7, "The": 0.3}))
    sources = sources_of({"a": "Receipts over $25 are itemised."})
    for _ in range(2):
        (graded,) = grade(grader, QUESTION, sources)
        assert (graded.grade, graded.method, graded.confidence) == ("ungraded", "fail-open", 0.0)
    assert len(llm.calls) == 2  # asked again: an ungraded unit is not cached


def test_a_failing_grader_leaves_every_passage_ungraded_after_one_calls_retries(rag: EnterpriseRAG) -> None:
    def down(messages: list[Any], kwargs: dict[str, Any]) -> Any:
        raise LLMError("503 Service Unavailable")

    grader, llm = grader_with(rag, down, max_retries=1)
    grades = grade(grader, QUESTION, sources_of({"a": "One.", "b": "Two.", "c": "Three."}))
    assert [(g.grade, g.method) for g in grades] == [("ungraded", "fail-open")] * 3
    assert len(llm.calls) == 2  # the first unit's call and its retry; the rest are not asked


# ---- thresholds per grader model, floor per embedding model, from the settings -----------------------------
def test_settings_give_thresholds_per_grader_model_and_a_fallback() -> None:
    cfg = WorkflowSettings(grade_thresholds={"grader-a": (0.3, 0.7)}, grade_thresholds_fallback=(0.05, 0.4))
    assert cfg.grade_thresholds_for("grader-a") == (0.3, 0.7)
    assert cfg.grade_thresholds_for("grader-b") == (0.05, 0.4)
    defaults = WorkflowSettings()
    local = "qwen2.5-coder-1.5b-instruct-q4_k_m"
    assert defaults.grade_thresholds_for(local) == FITTED_GRADE_THRESHOLDS[local]
    assert defaults.grade_floor_for("all-MiniLM-L6-v2-onnx-int8") == 0.12
    assert defaults.grade_floor_for("text-embedding-3-small") is None
    with pytest.raises(ValueError, match="partial <= yes"):
        WorkflowSettings(grade_thresholds={"grader-a": (0.8, 0.2)})


@pytest.mark.parametrize(("model", "expected"), [("grader-a", "partial"), ("grader-b", "no")])
def test_a_query_grades_with_the_thresholds_of_its_grader_model(
    fresh_dsn: str, tmp_path: Path, embed_model: Any, model: str, expected: str
) -> None:
    generator, _ = llms()
    handlers = {"grade": yes_probability(0.45), "rewrite": "paid vacation", "support": yes_probability(1.0)}
    grader = ScriptedLLM(handlers, model_name=model)
    settings = load_settings(None, database={"dsn": fresh_dsn}, workflow={
        "max_query_rewrites": 0, "grade_thresholds": {"grader-a": (0.3, 0.7)}, "grade_thresholds_fallback": (0.5, 0.9),
    })  # fmt: skip
    rag = EnterpriseRAG(data_dir=tmp_path / "data", settings=settings, embed_model=embed_model,
                        generator=generator, grader=grader)  # fmt: skip
    try:
        assert not rag.ingest(write_docs(tmp_path / "docs", DOCS), allowed_groups=["all-staff"]).failed
        res = rag.query(VACATION_QUESTION, user=ALICE)
        trace = rag.trace(res.trace_id, ALICE)
        assert trace is not None
        evidence = [e for s in trace["steps"] if s["step"] == "grade" for e in s["data"]["evidence"]]
        assert evidence and {label for _, label, _, method in evidence if method == "llm"} == {expected}
    finally:
        rag.close()
