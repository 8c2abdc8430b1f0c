"""The evidence-first answer workflow, branch by branch, with deterministic scripted LLMs.

Every test runs the real workflow on the real embedded PostgreSQL with the real
local embedding model; only the two LLM roles are :class:`ScriptedLLM` fakes.
Their handlers read the evidence, the listed lines and the statements out of the
prompt, so grades, answers and judgements follow from the documents, not from
call order.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import psycopg
import pytest

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.answer.checks.draft import MISSING_PART, QUOTED_INTRO, draft_text
from enterprise_rag.answer.workflow import FLAGGED_ANSWER, AnswerWorkflow
from enterprise_rag.config import WorkflowSettings, load_settings
from enterprise_rag.errors import ConfigError, LLMError, PermissionDeniedError
from enterprise_rag.llm import prompts
from enterprise_rag.llm.prompts import NOT_FOUND_ANSWER
from enterprise_rag.providers.curated_search import CuratedWebSearch
from enterprise_rag.providers.web_search import EgressPolicy, TavilyWebSearch
from enterprise_rag.retrieval.retriever import Retriever
from enterprise_rag.store.traces import REDACTED, TraceStore
from enterprise_rag.testing import ScriptedLLM, written_for_readers, written_to_the_model_if, yes_probability
from tests.support.http import RequestsRouter, http_requests  # noqa: F401  (fixture)
from tests.support.workflow import (
    ALICE,
    DOCS,
    FACT,
    GRADE_NO,
    GRADE_PARTIAL,
    P_PARTIAL,
    QUESTION,
    REFUSAL,
    RESTATED,
    Handler,
    answer_with,
    grade_partial_but_yes_when,
    grade_yes_if,
    llms,
    must_not_run,
    passage_in,
    reply,
    sentence_with,
    support_all,
    supported_if_stated,
    write_docs,
    writes,
)

CURATED = {
    "nitrogen.md": "---\nurl: https://intranet.example/lab/nitrogen\ntitle: Cryogenics handbook\n---\n"
    "# Liquid nitrogen\n\nLiquid nitrogen boils at minus 196 degrees Celsius at normal pressure.\n",
}
NITROGEN_QUESTION = "At what temperature does liquid nitrogen boil?"
VACATION = "Every employee receives 27 days of paid vacation per calendar year."
CARRY_OVER = "Unused vacation days carry over until March 31 of the following year."
STEPS = ["prepare", "retrieve", "grade", "screen", "generate", "verify", "finish"]


class Crash(BaseException):
    """Stands for a process dying mid-run: LLMCaller retries Exceptions, not this."""


def failing(exc: BaseException) -> Handler:
    def handler(messages: list[Any], kwargs: dict[str, Any]) -> Any:
        raise exc

    return handler


def fail_then(times: int, exc: Exception, then: Any) -> Handler:
    state = {"n": 0}

    def handler(messages: list[Any], kwargs: dict[str, Any]) -> Any:
        state["n"] += 1
        if state["n"] <= times:
            raise exc
        return then(messages, kwargs) if callable(then) else then

    return handler


def sleeping(seconds: float, then: Any) -> Handler:
    def handler(messages: list[Any], kwargs: dict[str, Any]) -> Any:
        time.sleep(seconds)
        return then(messages, kwargs) if callable(then) else then

    return handler


MakeRag = Callable[..., EnterpriseRAG]


@pytest.fixture
def make_rag(fresh_dsn: str, tmp_path: Path, embed_model: Any) -> Iterator[MakeRag]:
    """Build EnterpriseRAGs on one fresh database with injected scripted LLMs; the docs are ingested once."""
    docs = write_docs(tmp_path / "docs", DOCS)
    made: list[EnterpriseRAG] = []

    def build(
        generator: ScriptedLLM,
        grader: ScriptedLLM,
        *,
        workflow: dict[str, Any] | None = None,
        retrieval: dict[str, Any] | None = None,
        web_search: dict[str, Any] | None = None,
    ) -> EnterpriseRAG:
        overrides: dict[str, Any] = {
            "database": {"dsn": fresh_dsn},
            "workflow": {"llm_backoff_s": 0.01, "llm_timeout_s": 5.0, **(workflow or {})},
            "retrieval": retrieval or {},
        }
        if web_search is not None:
            overrides["web_search"] = web_search
        rag = EnterpriseRAG(
            data_dir=tmp_path / "data",
            settings=load_settings(None, **overrides),
            embed_model=embed_model,
            generator=generator,
            grader=grader,
        )
        if not made:
            report = rag.ingest(docs, allowed_groups=["all-staff"])
            assert not report.failed, report.failed
        made.append(rag)
        return rag

    yield build
    for rag in made:
        rag.close()


def step_data(trace: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [s["data"] for s in trace["steps"] if s["step"] == name]


# ---- proceed, payload, trace, grade cache ---------------------------------------------------------------
def test_one_retriever_serves_every_user_and_the_answer_workflow(make_rag: MakeRag) -> None:
    """Built once per store; the principal and top_k come with each call, from the workflow straight down."""
    generator, grader = llms()
    rag = make_rag(generator, grader, retrieval={"top_k": 2})
    calls: list[tuple[str, int | None]] = []
    built: list[Retriever] = []
    init, retrieve = Retriever.__init__, Retriever.retrieve

    def spy_init(self: Retriever, **kwargs: Any) -> None:
        built.append(self)
        init(self, **kwargs)

    def spy_retrieve(self: Retriever, question: str, principal: Principal, **kwargs: Any) -> Any:
        calls.append((principal.user_id, kwargs.get("top_k")))
        return retrieve(self, question, principal, **kwargs)

    bob = Principal("bob", ["all-staff"])
    with mock.patch.object(Retriever, "__init__", spy_init), mock.patch.object(Retriever, "retrieve", spy_retrieve):
        assert len(rag.retrieve(QUESTION, user=ALICE)) == 2  # retrieval.top_k
        assert len(rag.as_retriever(bob, top_k=1).retrieve(QUESTION)) == 1
        assert rag.query(QUESTION, user=ALICE).citations
    assert len(built) == 1
    assert calls[:2] == [("alice", None), ("bob", 1)] and calls[2:] and set(calls[2:]) == {("alice", None)}


def test_proceed_answers_with_citations_and_the_json_payload(make_rag: MakeRag) -> None:
    generator, grader = llms()
    rag = make_rag(generator, grader)

    res = rag.query(QUESTION, user=ALICE)

    assert res.answer == f"{VACATION} [S1]"
    p = res.pipeline
    assert p["decision"] == "proceed" and p["retrieval_used"] is True
    assert (p["query_rewrites"], p["hallucination_retries"], p["usefulness_retries"]) == (0, 0, 0)
    assert p["web_search_used"] is False and p["flagged_for_review"] is False
    assert (p["partial"], p["quoted"], p["missing_parts"]) == (False, False, [])
    graded = grader.count("grade")  # one call per evidence unit put to the grader
    # the sentence copies its line, so it needs no judge
    assert graded >= 2 and (generator.count("generate"), grader.count("support")) == (1, 0)
    assert grader.count("rewrite") == 0 and generator.count("revise") == 0
    assert grader.count("addressee") == 2  # the chosen paragraph: written to an AI model, written for its readers
    assert p["llm_calls"] == graded + 2 + 1 and p["prompt_tokens"] > 0 and p["completion_tokens"] > 0

    (citation,) = res.citations
    assert citation.label == "S1" and citation.kind == "corpus"
    assert citation.source.endswith("vacation.md") and citation.document_id
    assert citation.quote == VACATION  # the span the sentence rests on, verbatim
    ev = res.evaluation
    assert ev["support"] == {"label": "fully_supported", "score": 1.0, "unsupported_claims": []}
    assert ev["usefulness"] == {"label": "useful", "score": 1.0}
    assert ev["sources"] == {"corpus": 1, "web": 0}
    assert ev["retrieval_relevance"] > 0.5 and ev["confidence"] > 0.7

    payload = res.to_dict()
    json.dumps(payload)  # JSON-able as is
    assert set(payload) == {"answer", "citations", "evaluation", "pipeline", "trace_id"}
    assert payload["trace_id"] == res.trace_id and res.trace_id
    assert [set(c) for c in payload["citations"]] == [{"label", "source", "page", "document_id", "quote"}]
    assert set(payload["evaluation"]) == {"confidence", "retrieval_relevance", "support", "usefulness", "sources"}
    assert set(payload["evaluation"]["support"]) == {"label", "score", "unsupported_claims"}
    assert set(payload["evaluation"]["usefulness"]) == {"label", "score"}
    assert set(payload["evaluation"]["sources"]) == {"corpus", "web"}
    assert {
        "retrieval_used", "decision", "query_rewrites", "web_search_used", "hallucination_retries",
        "usefulness_retries", "flagged_for_review", "llm_calls", "prompt_tokens", "completion_tokens", "latency_ms",
    } <= set(payload["pipeline"])  # fmt: skip
    assert isinstance(payload["pipeline"]["latency_ms"], int) and payload["pipeline"]["latency_ms"] > 0


def test_trace_records_steps_evidence_prompts_for_its_owner_only(make_rag: MakeRag) -> None:
    generator, grader = llms()
    rag = make_rag(generator, grader)
    res = rag.query(QUESTION, user=ALICE)

    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None and trace["status"] == "done" and trace["question"] == QUESTION
    assert [s["step"] for s in trace["steps"]] == STEPS
    (grade,) = step_data(trace, "grade")
    assert grade["decision"] == "proceed"
    assert step_data(trace, "finish")[0]["answer_grade"] is None  # strong evidence: the answer is not graded
    assert any(label == "yes" and method == "llm" and VACATION in text for text, label, _, method in grade["evidence"])
    assert step_data(trace, "retrieve")[0]["query"] == QUESTION
    ((written, lines),) = step_data(trace, "generate")[0]["sentences"]
    assert written == VACATION and len(lines) == 1
    calls = trace["llm_calls"]
    graded = len(grade["evidence"])
    # the chosen paragraph is screened (to an AI model? for its readers?); the copied line needs no judge
    assert [c["name"] for c in calls] == ["grade"] * graded + ["addressee"] * 2 + ["generate"]
    assert [c["seq"] for c in calls] == list(range(1, graded + 4))
    assert all(c["response"].startswith('{"top_logprobs": ') for c in calls[:graded])  # what p(yes) was read from
    (screen,) = step_data(trace, "screen")
    assert screen["set_aside"] == [] and [text for text, _ in screen["paragraphs"]] == [VACATION]
    generate = calls[graded + 2]
    assert generate["role"] == "generator" and generate["model"] == "scripted"
    assert "Task: generate" in generate["messages"][-1]["content"]
    assert VACATION in json.loads(generate["response"]).values()
    assert trace["result"] == res.to_dict()

    mallory = Principal(user_id="mallory", groups=["all-staff"])
    assert rag.trace(res.trace_id, mallory) is None
    with pytest.raises(PermissionDeniedError):
        rag.resume(res.trace_id, mallory)
    with pytest.raises(PermissionDeniedError, match="another user"):
        rag.query(QUESTION, user=mallory, trace_id=res.trace_id)  # nor run on under its id


BONUS_DOC = {"bonus.md": "# Retention bonus\n\nThe retention bonus for grade 7 engineers is 9,400 euros a year.\n"}
BONUS_QUESTION = "How large is the retention bonus for grade 7?"


def test_a_trace_is_redacted_for_a_reader_who_lost_access_to_its_documents(make_rag: MakeRag, tmp_path: Path) -> None:
    generator, grader = llms(grade=grade_yes_if("9,400"), generate=answer_with("9,400"))
    rag = make_rag(generator, grader)
    assert not rag.ingest(write_docs(tmp_path / "hr", BONUS_DOC), allowed_groups=["hr"]).failed
    hana = Principal(user_id="hana", groups=["all-staff", "hr"])
    res = rag.query(BONUS_QUESTION, user=hana)
    assert "9,400" in res.answer

    full = rag.trace(res.trace_id, hana)
    assert full is not None and "9,400" in json.dumps(full, default=str)
    moved = Principal(user_id="hana", groups=["all-staff"])  # taken out of hr after the query
    trace = rag.trace(res.trace_id, moved)
    assert trace is not None
    dumped = json.dumps(trace, default=str)
    assert "9,400" not in dumped and "bonus.md" not in dumped and "grade 7 engineers" not in dumped
    assert trace["result"]["answer"] == REDACTED
    assert trace["result"]["citations"] == [{"redacted": REDACTED}] * len(full["result"]["citations"])
    assert all(c["messages"] == [] and c["response"] == REDACTED for c in trace["llm_calls"])
    assert [(s["step"], s["ms"]) for s in trace["steps"]] == [(s["step"], s["ms"]) for s in full["steps"]]
    assert trace["question"] == BONUS_QUESTION and trace["result"]["pipeline"] == full["result"]["pipeline"]

    assert rag.trace(res.trace_id, hana) == full  # still in hr: nothing is hidden
    assert rag.delete(str(tmp_path / "hr" / "bonus.md"))
    assert rag.trace(res.trace_id, hana)["result"]["answer"] == REDACTED  # type: ignore[index]  # deleted since


def test_redaction_covers_the_error_and_the_assistant_turns_of_the_history(make_rag: MakeRag, tmp_path: Path) -> None:
    """An earlier answer in the history, and a server's error message echoing its prompt, carry document text."""
    echoing = failing(RuntimeError("400 Bad Request: prompt too long: The retention bonus ... is 9,400 euros"))
    generator, grader = llms(grade=grade_yes_if("9,400"), generate=echoing)
    rag = make_rag(generator, grader, workflow={"llm_max_retries": 0, "max_query_rewrites": 0})
    assert not rag.ingest(write_docs(tmp_path / "hr", BONUS_DOC), allowed_groups=["hr"]).failed
    hana = Principal(user_id="hana", groups=["all-staff", "hr"])
    history = [{"role": "user", "content": BONUS_QUESTION}, {"role": "assistant", "content": "It is 9,400 euros."}]
    with pytest.raises(LLMError):
        rag.query("And for grade 8?", user=hana, history=history)
    (recent,) = [t for t in TraceStore(rag.db).recent(hana) if t["question"] == "And for grade 8?"]
    full = rag.trace(recent["trace_id"], hana)
    assert full is not None and "9,400" in str(full["error"]) and full["history"] == history

    trace = rag.trace(recent["trace_id"], Principal(user_id="hana", groups=["all-staff"]))
    assert trace is not None and "9,400" not in json.dumps(trace, default=str)
    assert trace["error"] == REDACTED and trace["status"] == "failed"
    assert trace["history"] == [history[0], {"role": "assistant", "content": REDACTED}]  # the user's own words stay


def test_a_trace_whose_documents_were_not_recorded_is_redacted(make_rag: MakeRag, fresh_dsn: str) -> None:
    generator, grader = llms()
    rag = make_rag(generator, grader)
    res = rag.query(QUESTION, user=ALICE)
    assert rag.trace(res.trace_id, ALICE)["result"]["answer"] == res.answer  # type: ignore[index]
    with psycopg.connect(fresh_dsn) as conn:  # as a trace written before documents were recorded
        conn.execute("UPDATE rag_traces SET document_ids = NULL WHERE trace_id = %s", (res.trace_id,))
    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None and FACT not in json.dumps(trace, default=str)
    assert trace["result"]["citations"] == [{"redacted": REDACTED}] * len(res.citations)


def test_same_question_twice_uses_the_grade_cache(make_rag: MakeRag) -> None:
    generator, grader = llms()
    rag = make_rag(generator, grader)
    first = rag.query(QUESTION, user=ALICE)
    second = rag.query(QUESTION, user=ALICE)

    graded = grader.count("grade")
    assert graded == first.pipeline["llm_calls"] - 3  # the first run only (2: the screen of its paragraph)
    assert second.answer == first.answer and second.pipeline["decision"] == "proceed"
    assert second.pipeline["llm_calls"] == 1 and grader.count("addressee") == 2  # generate; the screen's score cached
    trace = rag.trace(second.trace_id, ALICE)
    assert trace is not None
    methods = {method for _, _, _, method in step_data(trace, "grade")[0]["evidence"]}
    assert methods == {"cache"}


def test_follow_up_is_rewritten_standalone_before_retrieval(make_rag: MakeRag) -> None:
    generator, grader = llms(standalone="How many days of paid vacation does an employee get per year?")
    rag = make_rag(generator, grader)
    history = [
        {"role": "user", "content": "Tell me about the vacation policy."},
        {"role": "assistant", "content": "It covers paid vacation and carry-over."},
    ]
    res = rag.query("And how many days per year?", user=ALICE, history=history)

    assert grader.count("standalone") == 1
    assert FACT in res.answer and res.pipeline["decision"] == "proceed"
    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None and trace["history"] == history
    assert step_data(trace, "prepare")[0]["standalone_question"] == QUESTION
    assert step_data(trace, "retrieve")[0]["query"] == QUESTION


def test_failed_standalone_rewrite_falls_back_to_the_conversation_words(make_rag: MakeRag) -> None:
    generator, grader = llms(standalone=failing(TimeoutError("no answer")))
    rag = make_rag(generator, grader, workflow={"llm_max_retries": 1})
    history = [{"role": "user", "content": "Tell me about paid vacation."}, {"role": "assistant", "content": "Sure."}]
    res = rag.query("How many days per year?", user=ALICE, history=history)

    assert grader.count("standalone") == 2
    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None
    assert step_data(trace, "retrieve")[0]["query"] == "Tell me about paid vacation. How many days per year?"
    assert FACT in res.answer


def test_a_greeting_is_no_special_case(make_rag: MakeRag) -> None:
    """No phrase list decides that retrieval is not needed: a greeting finds no evidence and is a not-found."""
    generator, grader = llms(grade=GRADE_NO)
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 0})
    res = rag.query("Hello!", user=ALICE)
    assert res.answer == NOT_FOUND_ANSWER and res.pipeline["retrieval_used"] is True and generator.calls == []


# ---- evidence decides: proceed, augment, fallback --------------------------------------------------------
def test_augment_rewrites_up_to_the_cap_then_answers_from_partial_evidence(make_rag: MakeRag) -> None:
    """Weak evidence answers when what verified, put to the grader, states the answer."""
    generator, grader = llms(grade=grade_partial_but_yes_when(lambda text: text == RESTATED), generate=writes(RESTATED))
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 2})
    res = rag.query(QUESTION, user=ALICE)

    p = res.pipeline
    assert p["decision"] == "augment" and p["query_rewrites"] == 2 and grader.count("rewrite") == 2
    assert p["web_search_used"] is False and p["not_found"] is False
    assert generator.count("generate") == 1 and res.answer == f"{RESTATED} [S1]" and res.citations
    assert res.evaluation["retrieval_relevance"] <= 0.5
    assert res.evaluation["usefulness"] == {"label": "useful", "score": 1.0}  # the answer's own grade
    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None
    queries = [d["query"] for d in step_data(trace, "retrieve")]
    assert queries == [QUESTION, "paid vacation days per calendar year", "paid vacation days per calendar year"]
    assert [d["decision"] for d in step_data(trace, "grade")] == ["augment"] * 3
    (finish,) = step_data(trace, "finish")
    assert finish["answer_grade"]["grade"] == "yes" and finish["answer_grade"]["node_id"] == RESTATED


def test_a_verified_line_that_does_not_state_the_answer_is_a_not_found_on_weak_evidence(make_rag: MakeRag) -> None:
    """A sentence copied from its line verifies whatever the line says; on weak evidence the answer must also
    be graded as stating the answer, or it is withheld (and traced) and the outcome is a not-found."""
    generator, grader = llms(grade=GRADE_PARTIAL)
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 0})
    res = rag.query(QUESTION, user=ALICE)

    assert res.answer == NOT_FOUND_ANSWER and res.pipeline["not_found"] is True and res.citations == []
    assert generator.count("generate") == 1 and grader.count("support") == 0  # the copy needed no judge
    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None
    (finish,) = step_data(trace, "finish")
    assert finish["answer_grade"]["grade"] == "partial" and finish["withheld"] == f"{VACATION} [S1]"
    graded = [text for name, msgs in grader.calls if name == "grade" for text in [prompts.graded_line(msgs)]]
    assert graded[-1] == VACATION  # the verified answer alone, after the evidence units


def test_fallback_without_web_is_not_found_without_a_generation_call(make_rag: MakeRag) -> None:
    generator, grader = llms(grade=GRADE_NO)
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 1})
    res = rag.query(QUESTION, user=ALICE)

    assert res.answer == NOT_FOUND_ANSWER and res.citations == []
    p = res.pipeline
    assert p["decision"] == "fallback" and p["query_rewrites"] == 1 and p["web_search_used"] is False
    assert p["not_found"] is True and p["flagged_for_review"] is False
    assert generator.calls == [] and grader.count("support") == 0
    assert res.evaluation["sources"] == {"corpus": 0, "web": 0}
    assert res.evaluation["usefulness"]["label"] == "not_found"
    assert res.evaluation["confidence"] <= 0.5


def test_a_grader_no_stands_on_a_strong_dense_match(make_rag: MakeRag) -> None:
    """Nothing overrules the grader: a passage the model says no to stays no however similar it is."""
    generator, grader = llms(grade=GRADE_NO)
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 0})
    res = rag.query(QUESTION, user=ALICE)

    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None
    (retrieved,) = step_data(trace, "grade")
    asked = [e for e in retrieved["evidence"] if e[3] == "llm"]
    assert asked and all(label == "no" for _, label, _, _ in retrieved["evidence"])
    similarities = [n.node.metadata.get("similarity") or 0.0 for n in rag.retrieve(QUESTION, user=ALICE, top_k=5)]
    assert max(similarities) >= 0.6  # the vacation passage is a strong dense match, and still rejected
    assert res.pipeline["decision"] == "fallback" and generator.calls == [] and res.answer == NOT_FOUND_ANSWER


def test_strong_evidence_with_a_refusing_generator_still_answers_with_the_evidence_quoted(make_rag: MakeRag) -> None:
    """The generator is offered no refusal; when what it writes does not verify, the evidence it was given is the
    answer, quoted verbatim and marked so: never a not-found or a blanket flag over evidence that answers."""
    generator, grader = llms(generate=writes(REFUSAL))
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 0})
    res = rag.query(QUESTION, user=ALICE)

    assert res.answer == f'{QUOTED_INTRO}\n- "{VACATION}" [S1]'
    p = res.pipeline
    assert p["not_found"] is False and p["flagged_for_review"] is False and p["quoted"] is True
    assert generator.count("generate") == 1 and generator.count("revise") == 1  # one revision first
    (citation,) = res.citations
    assert citation.quote == VACATION and citation.source.endswith("vacation.md")
    assert res.evaluation["support"]["unsupported_claims"] == [REFUSAL]


def test_a_paraphrased_refusal_on_weak_evidence_is_a_not_found(make_rag: MakeRag) -> None:
    """Weak evidence and nothing verified: the outcome is a not-found, whatever words the refusal used."""
    generator, grader = llms(grade=GRADE_PARTIAL, generate=writes(REFUSAL))
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 0})
    res = rag.query(QUESTION, user=ALICE)
    assert res.answer == NOT_FOUND_ANSWER and res.pipeline["not_found"] is True and res.citations == []
    assert REFUSAL not in res.answer


def test_rewrites_that_find_the_same_sources_do_not_generate_again(make_rag: MakeRag) -> None:
    generator, grader = llms(grade=GRADE_PARTIAL, generate=writes(REFUSAL))
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 2})
    res = rag.query(QUESTION, user=ALICE)
    assert res.pipeline["not_found"] is True and res.pipeline["query_rewrites"] == 2
    assert generator.count("generate") == 1  # both rewrites retrieved the same passages


@pytest.mark.parametrize(
    "draft",
    [
        "Every employee receives 45 days of paid vacation per calendar year.",  # a number of no line
        "Vacation requests are approved by the regional payroll gateway.",  # not what its line says
        "I could not find the carry-over rule, but staff get 40 days of leave.",  # a refusal's words excuse nothing
    ],
    ids=["number-not-in-line", "ungrounded", "refusal-phrase"],
)
def test_an_unverifiable_sentence_is_revised_once_then_the_revision_is_used(make_rag: MakeRag, draft: str) -> None:
    generator, grader = llms(generate=writes(draft), revise=answer_with(FACT))
    rag = make_rag(generator, grader)
    res = rag.query(QUESTION, user=ALICE)
    assert generator.count("generate") == 1 and generator.count("revise") == 1
    assert res.answer == f"{VACATION} [S1]" and res.pipeline["partial"] is False  # the revision replaced it
    revise_prompt = generator.calls[-1][1][-1].content
    assert "not what their lines state" in revise_prompt and draft[:30] in revise_prompt


def test_a_verified_sentence_survives_a_revision_that_drops_it(make_rag: MakeRag) -> None:
    invented = "Every employee also gets 150 days of sabbatical."
    generator, grader = llms(grade=grade_yes_if("vacation"), generate=writes(VACATION, invented),
                             revise=writes(REFUSAL))  # fmt: skip
    rag = make_rag(generator, grader)
    res = rag.query(QUESTION, user=ALICE)
    assert generator.count("revise") == 1 and res.answer.startswith(f"{VACATION} [S1]") and "150" not in res.answer
    revise_prompt = generator.calls[-1][1][-1].content
    assert invented in revise_prompt and f'"{VACATION}"' not in revise_prompt  # only the failed one goes back
    assert res.pipeline["not_found"] is False and res.citations


def test_a_draft_with_one_unsupported_sentence_returns_the_supported_rest_marked_partial(make_rag: MakeRag) -> None:
    """On partial evidence (no line clears the strong threshold) a line is never quoted for a failed sentence;
    the verified rest, put to the grader, states the answer."""
    unsupported = "Vacation is paid at double the usual salary rate."

    def grade(messages: list[Any], kwargs: dict[str, Any]) -> Any:
        text = passage_in(messages)
        return yes_probability(1.0 if text == VACATION else P_PARTIAL if "vacation" in text else 0.0)

    generator, grader = llms(grade=grade, generate=writes(VACATION, unsupported), revise=writes(unsupported))
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 0})
    res = rag.query(QUESTION, user=ALICE)
    assert res.answer == f"{VACATION} [S1]" and "double" not in res.answer
    assert res.pipeline["partial"] is True and res.pipeline["flagged_for_review"] is False
    assert res.evaluation["support"] == {"label": "partially_supported", "score": 0.5,
                                         "unsupported_claims": [unsupported]}  # fmt: skip


def test_a_chosen_line_whose_sentence_fails_twice_is_quoted_beside_the_verified_rest(make_rag: MakeRag) -> None:
    wrong = "Unused vacation days carry over until April 30 of the following year."
    generator, grader = llms(grade=grade_yes_if("vacation"), generate=writes(VACATION, wrong), revise=writes(wrong))
    rag = make_rag(generator, grader)
    res = rag.query(QUESTION, user=ALICE)
    assert generator.count("revise") == 1 and "April" not in res.answer
    assert res.answer == f'{VACATION} [S1]\n{QUOTED_INTRO}\n- "{CARRY_OVER}" [S1]'
    assert res.pipeline["quoted"] is True and res.pipeline["partial"] is False
    assert res.evaluation["support"]["unsupported_claims"] == [wrong]  # the model's claim, not the quoted line


def test_a_two_part_question_answers_the_part_it_can_and_names_the_other(make_rag: MakeRag) -> None:
    question = "How many days of paid vacation does an employee get per year, and how long must passwords be?"
    generator, grader = llms()
    rag = make_rag(generator, grader)
    res = rag.query(question, user=ALICE)
    missing = MISSING_PART.format(part="how long must passwords be")
    assert res.answer == f"{VACATION} [S1]\n{missing}"
    assert res.pipeline["partial"] is True and res.pipeline["missing_parts"] == ["how long must passwords be"]
    assert res.evaluation["usefulness"]["label"] == "partially_useful"


def test_a_negative_fact_is_an_answer_with_its_citation(make_rag: MakeRag, tmp_path: Path) -> None:
    rule = "You don't have to pre-approve trips of $500 or less"
    doc = write_docs(tmp_path / "more", {"travel.md": f"# Travel approval\n\n{rule}.\n"})
    generator, grader = llms(grade=grade_yes_if("pre-approve"), generate=answer_with("pre-approve"))
    rag = make_rag(generator, grader)
    assert not rag.ingest(doc, allowed_groups=["all-staff"]).failed
    res = rag.query("Do I need approval for a $300 trip?", user=ALICE)
    assert rule in res.answer and res.pipeline["not_found"] is False
    assert generator.count("revise") == 0
    (citation,) = res.citations
    assert citation.source.endswith("travel.md") and "pre-approve trips" in citation.quote
    assert citation.relative_source == "travel.md"  # relative to the folder it was ingested from


def test_the_judge_is_neutral_and_sees_each_claim_with_its_own_lines(make_rag: MakeRag) -> None:
    carry_over = "Unused vacation days carry over until March 31."
    generator, grader = llms(grade=grade_yes_if("vacation"), generate=writes(RESTATED, carry_over))
    rag = make_rag(generator, grader)
    rag.query(QUESTION, user=ALICE)
    supports = [msgs for name, msgs in grader.calls if name == "support"]
    (generate,) = [msgs for name, msgs in generator.calls if name == "generate"]
    assert len(supports) == 2 and all(s[0].content == generate[0].content for s in supports)  # the shared prefix
    statements = [prompts.statement_of(s) for s in supports]
    assert statements == [RESTATED, carry_over]
    for support, line, other in zip(supports, [VACATION, CARRY_OVER], [CARRY_OVER, VACATION], strict=True):
        assert line in support[-1].content and other not in support[-1].content  # the claim's own line only
        assert not re.search(r"answer|draft|generat|correct", support[-1].content, re.I)


def system_messages(*models: ScriptedLLM) -> list[tuple[str, str]]:
    """(call name, system message) of every call the models received, in the order each model got them."""
    return [(name, str(msgs[0].content)) for model in models for name, msgs in model.calls]


def test_every_call_of_a_question_starts_with_one_byte_identical_prefix(make_rag: MakeRag) -> None:
    """Grades, generation and the judge read the same rules and sources: a prompt cache evaluates them once. The
    screen's two questions share the paragraph alone, so its score is the paragraph's whatever came with it."""
    generator, grader = llms(generate=writes(RESTATED))
    rag = make_rag(generator, grader)
    res = rag.query(QUESTION, user=ALICE)
    assert FACT in res.answer
    calls = system_messages(grader, generator)
    assert {name for name, _ in calls} == {"grade", "addressee", "generate", "support"}
    assert len({system for name, system in calls if name != "addressee"}) == 1, calls
    screened = [system for name, system in calls if name == "addressee"]
    assert len(screened) == 2 and len(set(screened)) == 1
    assert VACATION in screened[0] and CARRY_OVER not in screened[0] and QUESTION not in screened[0]
    assert len([name for name, _ in calls if name == "grade"]) >= 2  # several units, one prefix


def test_a_paragraph_written_to_the_model_is_neither_written_from_nor_cited(make_rag: MakeRag) -> None:
    """Both vacation lines are evidence; the screen takes the carry-over paragraph as written to an AI model, so
    generation is not given it and nothing quotes it. A second question meets the cached score."""
    generator, grader = llms(grade=grade_yes_if("vacation"), addressee=written_to_the_model_if("carry over"))
    rag = make_rag(generator, grader)
    res = rag.query("What does the vacation policy say?", user=ALICE)
    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None
    (screen,) = step_data(trace, "screen")
    scores = dict(screen["paragraphs"])
    assert scores == {VACATION: -1.0, CARRY_OVER: 1.0} and len(screen["set_aside"]) == 1
    (generate,) = [msgs for name, msgs in generator.calls if name == "generate"]
    listed = list(prompts.listed_lines(generate).values())
    assert any(FACT in line for line in listed) and not any("March 31" in line for line in listed)
    assert FACT in res.answer and "March 31" not in res.answer
    assert all("March 31" not in (c.quote or "") for c in res.citations)

    again = rag.query("What does the vacation policy state?", user=ALICE)
    assert grader.count("addressee") == 4 and "March 31" not in again.answer  # scored once per paragraph


def test_the_evidence_left_after_the_screen_is_chosen_again(make_rag: MakeRag) -> None:
    """The carry-over line outranks the fact line by more than the evidence margin; once the screen sets the
    carry-over paragraph aside, the choice is made again from what is left, and the fact line answers."""
    margin = WorkflowSettings().evidence_margin
    best, below = 1.0, 0.9 - margin  # both above the yes threshold; the fact line outside the margin of the best

    def grade(messages: list[Any], kwargs: dict[str, Any]) -> Any:
        line = passage_in(messages)
        return yes_probability(best if "carry over" in line else below if FACT in line else 0.0)

    generator, grader = llms(grade=grade, addressee=written_to_the_model_if("carry over"))
    rag = make_rag(generator, grader)
    res = rag.query(QUESTION, user=ALICE)
    assert FACT in res.answer and "March 31" not in res.answer and res.pipeline["decision"] == "proceed"
    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None
    (screen,) = step_data(trace, "screen")
    assert dict(screen["paragraphs"]) == {CARRY_OVER: 1.0, VACATION: -1.0} and len(screen["set_aside"]) == 1
    assert grader.count("addressee") == 4  # each paragraph once: the second round reads the first's score


def test_a_re_retrieval_starts_a_new_prefix_that_generation_shares(make_rag: MakeRag) -> None:
    """One passage per retrieval: the first has no evidence, the rewrite finds another, which answers."""
    generator, grader = llms(grade=grade_yes_if("Meals"), generate=answer_with("Meals"),
                             rewrite="meals reimbursed during business travel per day")  # fmt: skip
    rag = make_rag(generator, grader, retrieval={"top_k": 1}, workflow={"max_query_rewrites": 1})
    res = rag.query(QUESTION, user=ALICE)
    assert "60 euros" in res.answer and res.pipeline["query_rewrites"] == 1
    prefixes = list(dict.fromkeys(system for name, system in system_messages(grader) if name == "grade"))
    first, second = prefixes
    assert "vacation" in first and "Meals" in second and "vacation" not in second  # the rejected passage left
    assert {system for name, system in system_messages(generator, grader) if name in ("generate", "support")} == {
        second
    }


def test_a_passage_kept_before_a_re_retrieval_shares_the_new_prefix(make_rag: MakeRag) -> None:
    """The first passage is only partial evidence, so the question is rewritten; the second round grades over
    both passages, the set generation then reads: the answer reuses the second round's prefix."""
    partial = sum(WorkflowSettings().grade_thresholds_fallback) / 2

    def grade(messages: list[Any], kwargs: dict[str, Any]) -> Any:
        return yes_probability(1.0 if "Meals" in passage_in(messages) else partial)

    generator, grader = llms(grade=grade, generate=answer_with("Meals"),
                             rewrite="meals reimbursed during business travel per day")  # fmt: skip
    rag = make_rag(generator, grader, retrieval={"top_k": 1}, workflow={"max_query_rewrites": 1})
    res = rag.query(QUESTION, user=ALICE)
    assert "60 euros" in res.answer and res.pipeline["query_rewrites"] == 1
    prefixes = list(dict.fromkeys(system for name, system in system_messages(grader) if name == "grade"))
    first, second = prefixes
    assert "vacation" in first and "Meals" not in first and "vacation" in second and "Meals" in second
    assert {system for name, system in system_messages(generator, grader) if name in ("generate", "support")} == {
        second
    }


def test_a_question_naming_a_code_no_source_names_is_not_found_without_generating(make_rag: MakeRag) -> None:
    question = "How many days of paid vacation does contract type VX-9 get per year?"
    generator, grader = llms()
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 0})
    res = rag.query(question, user=ALICE)
    assert res.answer == NOT_FOUND_ANSWER and res.pipeline["not_found"] is True and generator.calls == []
    # the aid is one setting: switched off, the same question is answered from the neighbouring facts
    generator, grader = llms()
    plain = make_rag(generator, grader, workflow={"max_query_rewrites": 0, "compensations": []})
    assert FACT in plain.query(question, user=ALICE).answer
    with pytest.raises(ConfigError, match="unknown"):
        make_rag(generator, grader, workflow={"compensations": ["nonsense"]}).query(question, user=ALICE)


# ---- web fallback and egress ----------------------------------------------------------------------------
def test_web_fallback_uses_curated_sources_labelled_web_with_capped_confidence(
    make_rag: MakeRag, tmp_path: Path
) -> None:
    curated = write_docs(tmp_path / "curated", CURATED)
    generator, grader = llms(grade=grade_yes_if("196"), generate=answer_with("196"),
                             rewrite="liquid nitrogen boiling point")  # fmt: skip
    rag = make_rag(
        generator, grader,
        workflow={"max_query_rewrites": 1, "web_phrasings": 2, "web_confidence_cap": 0.3},
        web_search={"provider": "curated", "curated_dir": str(curated), "egress_groups": []},
    )  # fmt: skip
    res = rag.query(NITROGEN_QUESTION, user=ALICE)

    assert "196" in res.answer
    p = res.pipeline
    assert p["decision"] == "fallback" and p["web_search_used"] is True and p["query_rewrites"] == 1
    assert grader.count("rewrite") == 2  # one corpus rewrite, one extra web phrasing
    (citation,) = res.citations
    assert citation.kind == "web" and citation.source == "https://intranet.example/lab/nitrogen"
    assert "196" in citation.quote
    assert res.evaluation["sources"] == {"corpus": 0, "web": 1}
    assert res.evaluation["retrieval_relevance"] < 0.5
    assert res.evaluation["confidence"] <= 0.3
    assert res.sources[0]["kind"] == "web"
    generate_prompt = generator.calls[0][1][0].content
    assert "WEB RESULT, not a company document" in generate_prompt
    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None
    (web,) = step_data(trace, "web")
    assert web["results"] == ["https://intranet.example/lab/nitrogen"] and len(web["phrasings"]) == 2


def test_augment_with_web_keeps_corpus_passages_and_caps_confidence(make_rag: MakeRag, tmp_path: Path) -> None:
    curated = write_docs(tmp_path / "curated", {
        "leave.md": "---\nurl: https://intranet.example/hr/leave-faq\n---\n# Leave FAQ\n\n"
        "Staff get 27 days of paid vacation each year according to the public leave FAQ.\n",
    })  # fmt: skip

    def cite_every_source(messages: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        lines = prompts.listed_lines(messages)
        return reply(lines, {n: f"{sentence_with(text, FACT)}." for n, text in lines.items() if FACT in text})

    both = grade_partial_but_yes_when(lambda text: text.count(FACT) == 2)  # the answer resting on both sources
    generator, grader = llms(grade=both, generate=cite_every_source)
    rag = make_rag(
        generator, grader, workflow={"max_query_rewrites": 0, "web_confidence_cap": 0.4},
        web_search={"provider": "curated", "curated_dir": str(curated)},
    )  # fmt: skip
    res = rag.query(QUESTION, user=ALICE)

    p = res.pipeline
    assert p["decision"] == "augment" and p["web_search_used"] is True
    assert grader.count("rewrite") == 0  # augment searches the web with the question only, no expansion
    kinds = {c.source: c.kind for c in res.citations}
    assert kinds["https://intranet.example/hr/leave-faq"] == "web"
    assert any(k == "corpus" and s.endswith("vacation.md") for s, k in kinds.items())
    assert res.evaluation["sources"]["web"] == 1 and res.evaluation["sources"]["corpus"] >= 1
    # No corpus passage answered (all partial): resting partly on the web, it is not high-confidence.
    assert res.evaluation["retrieval_relevance"] <= 0.5
    assert res.evaluation["confidence"] <= 0.4


def test_web_fallback_refused_when_egress_not_allowed_for_the_groups(make_rag: MakeRag) -> None:
    generator, grader = llms(grade=GRADE_NO)
    rag = make_rag(
        generator, grader, workflow={"max_query_rewrites": 0},
        web_search={"provider": "tavily", "api_key": "tvly-test-not-a-key", "egress_groups": ["research"]},
    )  # fmt: skip
    assert rag.providers.egress_policy.leaves_machine
    res = rag.query(NITROGEN_QUESTION, user=ALICE)  # alice is not in 'research': the question stays here

    assert res.answer == NOT_FOUND_ANSWER and res.pipeline["web_search_used"] is False
    assert res.pipeline["decision"] == "fallback" and generator.calls == []
    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None and step_data(trace, "web") == []


NITROGEN_RESULT = {
    "query": "",
    "results": [{"title": "Cryogenics", "url": "https://lab.example/nitrogen", "score": 0.9, "raw_content": None,
                 "content": "Liquid nitrogen boils at minus 196 degrees Celsius at normal pressure."}],
}  # fmt: skip


def test_web_search_sends_only_the_users_own_words(make_rag: MakeRag, http_requests: RequestsRouter) -> None:
    """An assistant turn quotes an internal value and the standalone rewrite copies it: the web query
    (and every extra phrasing) is made from the user's turns alone, and the trace holds what was sent."""
    secret = "KV-CONFIDENTIAL-7731"
    history = [
        {"role": "user", "content": "Which storage tank holds our nitrogen?"},
        {"role": "assistant", "content": f"Tank {secret} in the basement holds it. [S1]"},
    ]
    question = "At what temperature does it boil?"

    def echo_rewrite(messages: list[Any], kwargs: dict[str, Any]) -> str:  # a rewriter copies what it is shown
        return re.search(r"Question: (.*)", messages[-1].content).group(1) + " boiling point"  # type: ignore[union-attr]

    http_requests.add("POST", "https://api.tavily.com/search", (200, NITROGEN_RESULT))
    generator, grader = llms(grade=grade_yes_if("196"), generate=answer_with("196"), rewrite=echo_rewrite,
                             standalone=f"At what temperature does the nitrogen in tank {secret} boil?")  # fmt: skip
    rag = make_rag(
        generator, grader, workflow={"max_query_rewrites": 1, "web_phrasings": 2, "compensations": []},
        web_search={"provider": "tavily", "api_key": "tvly-test-not-a-key", "egress_groups": ["research"]},
    )  # fmt: skip
    rita = Principal(user_id="rita", groups=["all-staff", "research"])
    res = rag.query(question, user=rita, history=history)

    assert "196" in res.answer and res.pipeline["web_search_used"] is True
    sent = [json.loads(str(c.body))["query"] for c in http_requests.calls]
    own = f"{history[0]['content']} {question}"
    assert sent == [own, f"{own} boiling point"]
    assert not any(secret in str(c.body) or "basement" in str(c.body) for c in http_requests.calls)
    trace = rag.trace(res.trace_id, rita)
    assert trace is not None
    assert step_data(trace, "retrieve")[0]["query"].endswith(f"tank {secret} boil?")  # inside, the rewrite is used
    assert step_data(trace, "web")[0]["phrasings"] == sent


def test_web_search_failure_falls_back_to_not_found(make_rag: MakeRag, tmp_path: Path) -> None:
    curated = write_docs(tmp_path / "curated", CURATED)
    generator, grader = llms(grade=GRADE_NO)
    rag = make_rag(
        generator, grader, workflow={"max_query_rewrites": 0},
        web_search={"provider": "curated", "curated_dir": str(curated)},
    )  # fmt: skip
    assert rag.providers.web_search is not None
    for f in curated.iterdir():
        f.unlink()
    curated.rmdir()  # the source breaks after start-up: the query must still get a clear answer

    res = rag.query(NITROGEN_QUESTION, user=ALICE)
    assert res.answer == NOT_FOUND_ANSWER and res.pipeline["web_search_used"] is False
    assert generator.calls == []
    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None and "no longer exists" in step_data(trace, "web")[0]["error"]


def test_egress_policy_gates_only_sources_that_leave_the_machine(tmp_path: Path) -> None:
    import tavily

    tavily_search = TavilyWebSearch(tavily.TavilyClient(api_key="tvly-test-not-a-key"))
    research = Principal(user_id="rita", groups=["research", "all-staff"])
    policy = EgressPolicy(tavily_search, ["research"])
    assert policy.leaves_machine
    assert policy.allows(research) and not policy.allows(ALICE)
    assert not policy.allows(Principal(user_id="nobody"))
    assert not EgressPolicy(tavily_search, []).allows(research)  # empty list = nobody
    assert not EgressPolicy(None, ["research"]).allows(research)  # disabled = nobody
    curated = CuratedWebSearch(write_docs(tmp_path / "curated", CURATED))
    assert not EgressPolicy(curated, []).leaves_machine and EgressPolicy(curated, []).allows(ALICE)
    with pytest.raises(PermissionDeniedError):
        policy.allows(None)  # type: ignore[arg-type]


# ---- the judge: quoted evidence rather than a flag; fail-closed on outage ------------------------------
def test_an_answer_the_judge_never_supports_is_the_evidence_quoted_never_a_blanket_flag(make_rag: MakeRag) -> None:
    generator, grader = llms(generate=writes(RESTATED), support=support_all(0.0))
    rag = make_rag(generator, grader, workflow={"max_revisions": 1})
    res = rag.query(QUESTION, user=ALICE)

    p = res.pipeline
    assert p["flagged_for_review"] is False and p["quoted"] is True and p["hallucination_retries"] == 1
    assert res.answer == f'{QUOTED_INTRO}\n- "{VACATION}" [S1]'
    assert generator.count("generate") == 1 and generator.count("revise") == 1 and grader.count("support") == 2
    assert res.evaluation["support"]["label"] == "not_supported"
    revise_prompt = next(msgs for name, msgs in generator.calls if name == "revise")[-1].content
    assert f'"{RESTATED}"' in revise_prompt and "its lines do not state this" in revise_prompt


def test_a_revision_that_verifies_is_the_answer(make_rag: MakeRag) -> None:
    replies = iter([support_all(0.0), supported_if_stated])
    generator, grader = llms(generate=writes(RESTATED), support=lambda m, k: next(replies)(m, k))
    rag = make_rag(generator, grader)
    res = rag.query(QUESTION, user=ALICE)
    assert res.pipeline["hallucination_retries"] == 1 and res.pipeline["flagged_for_review"] is False
    assert res.answer == f"{RESTATED} [S1]" and res.evaluation["support"]["label"] == "fully_supported"
    assert res.pipeline["quoted"] is False


# ---- LLM failures: bounded retries, then a clear outcome ------------------------------------------------
def test_grader_failure_fails_open_with_ungraded_evidence(make_rag: MakeRag) -> None:
    generator, grader = llms(grade=failing(RuntimeError("500 Internal Server Error")))
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 0, "llm_max_retries": 2})
    res = rag.query(QUESTION, user=ALICE)

    assert grader.count("grade") == 3  # 1 + 2 retries, then give up
    assert res.pipeline["decision"] == "augment" and FACT in res.answer and res.citations
    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None
    evidence = step_data(trace, "grade")[0]["evidence"]
    assert evidence and all((label, method) == ("ungraded", "fail-open") for _, label, _, method in evidence)
    # A failed grading is not cached: the next run asks again.
    rag.query(QUESTION, user=ALICE)
    assert grader.count("grade") == 6


def test_a_failed_call_logs_no_prompt_or_source_text_above_debug(
    make_rag: MakeRag, caplog: pytest.LogCaptureFixture
) -> None:
    """A server's error message can echo the prompt (the sources): WARNING says what failed, DEBUG the message."""
    generator, grader = llms(grade=failing(RuntimeError(f"500 Internal Server Error: {VACATION}")))
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 0, "llm_max_retries": 1})
    with caplog.at_level(logging.DEBUG, logger="enterprise_rag"):
        rag.query(QUESTION, user=ALICE)
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("grade" in m and "RuntimeError" in m for m in loud), loud
    assert not any(FACT in m or "vacation" in m for m in loud), loud
    assert any(VACATION in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


def test_grader_timeout_is_retried_then_fails_open(make_rag: MakeRag) -> None:
    generator, grader = llms(grade=sleeping(1.0, grade_yes_if(FACT)))
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 0, "llm_timeout_s": 0.2, "llm_max_retries": 1})
    t0 = time.perf_counter()
    res = rag.query(QUESTION, user=ALICE)

    assert grader.count("grade") == 2
    assert time.perf_counter() - t0 < 5
    assert res.pipeline["decision"] == "augment" and FACT in res.answer


def test_rate_limit_is_retried_with_backoff_then_succeeds(make_rag: MakeRag) -> None:
    generator, grader = llms(
        generate=writes(RESTATED), support=fail_then(2, RuntimeError("429 Too Many Requests"), supported_if_stated)
    )
    rag = make_rag(generator, grader, workflow={"llm_max_retries": 2, "llm_backoff_s": 0.05})
    t0 = time.perf_counter()
    res = rag.query(QUESTION, user=ALICE)

    assert grader.count("support") == 3
    assert time.perf_counter() - t0 >= 0.05 + 0.1  # backoff 0.05 s, then 0.1 s
    assert res.pipeline["flagged_for_review"] is False and FACT in res.answer
    # failed attempts are not successful calls
    assert res.pipeline["llm_calls"] == grader.count("grade") + grader.count("addressee") + 2


def test_a_judge_always_rate_limited_fails_closed(make_rag: MakeRag) -> None:
    generator, grader = llms(generate=writes(RESTATED), support=failing(RuntimeError("429 Too Many Requests")))
    rag = make_rag(generator, grader, workflow={"llm_max_retries": 1})
    res = rag.query(QUESTION, user=ALICE)

    assert grader.count("support") == 2 and generator.count("revise") == 0  # no revision on an unjudged claim
    p = res.pipeline
    assert p["flagged_for_review"] is True and p["hallucination_retries"] == 0
    assert res.answer == FLAGGED_ANSWER and res.citations == []
    assert res.evaluation["confidence"] <= 0.2


def test_replies_that_are_neither_yes_nor_no_grade_nothing_and_support_nothing(make_rag: MakeRag) -> None:
    """Not retried (the same prompt gets the same reply): the evidence is kept ungraded (fail-open), and a judge
    that says neither supports nothing (fail-closed), so weak evidence ends in a not-found."""
    generator, grader = llms(grade="Perhaps", generate=writes(RESTATED), support="Perhaps")
    rag = make_rag(generator, grader, workflow={"max_query_rewrites": 0, "llm_max_retries": 2})
    res = rag.query(QUESTION, user=ALICE)

    trace = rag.trace(res.trace_id, ALICE)
    assert trace is not None
    evidence = step_data(trace, "grade")[0]["evidence"]
    assert evidence and all((label, method) == ("ungraded", "fail-open") for _, label, _, method in evidence)
    assert grader.count("grade") == len(evidence) and res.pipeline["decision"] == "fallback"
    assert res.answer == NOT_FOUND_ANSWER


def test_generator_timeout_raises_a_clear_error_and_marks_the_trace_failed(make_rag: MakeRag) -> None:
    generator, grader = llms(generate=sleeping(1.0, answer_with(FACT)))
    rag = make_rag(generator, grader, workflow={"llm_timeout_s": 0.2, "llm_max_retries": 1})
    with pytest.raises(LLMError, match=r"'generate' failed after 2 attempts: no answer within 0\.2 s"):
        rag.query(QUESTION, user=ALICE)
    assert generator.count("generate") == 2

    (recent,) = [t for t in _recent(rag) if t["question"] == QUESTION]
    trace = rag.trace(recent["trace_id"], ALICE)
    assert trace is not None and trace["status"] == "failed" and "generate" in trace["error"]


def _recent(rag: EnterpriseRAG) -> list[dict[str, Any]]:
    return TraceStore(rag.db).recent(ALICE)


# ---- resume -------------------------------------------------------------------------------------------
def test_resume_after_a_crash_replays_finished_calls(make_rag: MakeRag) -> None:
    crash = failing(Crash("process killed during the support check"))
    generator, grader = llms(generate=writes(RESTATED), support=crash)
    rag = make_rag(generator, grader)
    with pytest.raises(Crash):
        rag.query(QUESTION, user=ALICE)
    (recent,) = _recent(rag)
    trace_id = recent["trace_id"]
    crashed = rag.trace(trace_id, ALICE)
    assert crashed is not None and crashed["status"] == "failed" and "Crash" in crashed["error"]
    graded = sum(1 for c in crashed["llm_calls"] if c["name"] == "grade")
    assert graded >= 1
    assert [c["name"] for c in crashed["llm_calls"]] == ["grade"] * graded + ["addressee"] * 2 + ["generate"]

    generator2 = ScriptedLLM({"generate": must_not_run("generate"), "revise": must_not_run("revise")})
    grader2 = ScriptedLLM({"grade": must_not_run("grade"), "rewrite": must_not_run("rewrite"),
                           "support": supported_if_stated, "addressee": written_for_readers})  # fmt: skip
    resumed_rag = make_rag(generator2, grader2)
    res = resumed_rag.resume(trace_id, ALICE)

    assert res.trace_id == trace_id and res.answer == f"{RESTATED} [S1]"
    assert [name for name, _ in grader2.calls] == ["support"] and generator2.calls == []
    assert res.pipeline["llm_calls"] == 1 and res.pipeline["llm_calls_replayed"] >= 1
    assert res.pipeline["flagged_for_review"] is False and res.citations
    done = resumed_rag.trace(trace_id, ALICE)
    assert done is not None and done["status"] == "done" and done["error"] is None
    assert [c["name"] for c in done["llm_calls"]] == ["grade"] * graded + ["addressee"] * 2 + ["generate", "support"]
    assert [c["seq"] for c in done["llm_calls"]] == list(range(1, graded + 5))
    assert done["result"] == res.to_dict()


def test_stream_query_yields_steps_then_the_checked_answer_then_the_result(make_rag: MakeRag) -> None:
    generator, grader = llms()
    rag = make_rag(generator, grader)
    events = list(rag.stream_query(QUESTION, user=ALICE))
    kinds = [e.kind for e in events]
    assert kinds[-1] == "result" and "answer" in kinds and kinds.index("answer") > kinds.index("step")
    steps = [e.name for e in events if e.kind == "step"]
    assert steps == STEPS
    result = events[-1].data
    assert "".join(e.text for e in events if e.kind == "answer").replace(" ", "") == result.answer.replace(" ", "")
    trace = rag.trace(result.trace_id, ALICE)
    assert trace is not None
    streamed = [(e.name, json.loads(json.dumps(e.data))) for e in events if e.kind == "step"]
    assert streamed == [(s["step"], s["data"]) for s in trace["steps"]]  # what was stored, as it happened
    finished = [e for e in events if e.kind == "step"]
    assert [e.seconds for e in finished] == pytest.approx([s["ms"] / 1000 for s in trace["steps"]], abs=1e-3)
    for e in finished:  # each step is announced as it begins, before it finishes
        assert any(x.kind == "started" and x.name == e.name for x in events[: events.index(e)])
    # The draft's text (not its JSON) streams while the generator writes, before the checks release the answer.
    drafts = [i for i, e in enumerate(events) if e.kind == "draft"]
    assert len(drafts) > 1 and max(drafts) < kinds.index("answer")
    generated = next(c for c in trace["llm_calls"] if c["name"] == "generate")["response"]
    assert "".join(events[i].text for i in drafts) == draft_text(generated) == VACATION


def test_leaving_a_stream_early_cancels_the_run_and_it_can_be_resumed(make_rag: MakeRag) -> None:
    generator, grader = llms()
    rag = make_rag(generator, grader)
    events = rag.stream_query(QUESTION, user=ALICE)
    first = next(e for e in events if e.kind == "step")
    assert first.name == "prepare"
    events.close()

    (recent,) = _recent(rag)
    left = rag.trace(recent["trace_id"], ALICE)
    assert left is not None and left["status"] == "failed" and [s["step"] for s in left["steps"]] == ["prepare"]
    res = rag.resume(recent["trace_id"], ALICE)
    assert FACT in res.answer and res.trace_id == recent["trace_id"]


# ---- one workflow instance, concurrent runs ------------------------------------------------------------
# Each question has its own answer in the documents; every principal reads them all (all-staff).
CONCURRENT = {
    "How many days of paid vacation does an employee get per year?": "27 days",
    "Until when do unused vacation days carry over?": "March 31",
    "Up to how much are meals during business travel reimbursed per day?": "60 euros",
    "Within how many days must receipts be uploaded to the expense portal?": "30 days",
    "How long must passwords be at least?": "14 characters",
    "How often are passwords rotated?": "180 days",
    "Can an old password be used again?": "never reused",
    "What does every employee receive per calendar year?": "paid vacation",
}


def by_question(handler_for: Callable[[str], Handler]) -> Handler:
    """Route a grade / generate prompt to the handler for the question it asks."""

    def handler(messages: list[Any], kwargs: dict[str, Any]) -> Any:
        match = re.search(r"^Question: (.*)$", messages[-1].content, re.M)
        assert match is not None, messages[-1].content
        return handler_for(match.group(1))(messages, kwargs)

    return handler


def test_concurrent_queries_share_one_workflow_and_keep_their_runs_apart(
    make_rag: MakeRag, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight queries at once on one EnterpriseRAG: one workflow instance serves them all, while each
    result and stored trace holds only its own question, steps and LLM calls."""
    served: list[AnswerWorkflow] = []
    run = AnswerWorkflow.run

    def spy(self: AnswerWorkflow, *args: Any, **kwargs: Any) -> Any:
        served.append(self)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(AnswerWorkflow, "run", spy)
    # Generation waits (briefly) until two runs are generating at once: the runs really overlap.
    lock, overlapping, in_flight = threading.Lock(), threading.Event(), [0]

    def generate(messages: list[Any], kwargs: dict[str, Any]) -> Any:
        with lock:
            in_flight[0] += 1
            if in_flight[0] >= 2:
                overlapping.set()
        overlapping.wait(timeout=2)
        try:
            return by_question(lambda q: answer_with(CONCURRENT[q]))(messages, kwargs)
        finally:
            with lock:
                in_flight[0] -= 1

    generator, grader = llms(grade=by_question(lambda q: grade_yes_if(CONCURRENT[q])), generate=generate)
    rag = make_rag(generator, grader)
    asks = [(q, Principal(user_id=f"user{i}", groups=["all-staff"])) for i, q in enumerate(CONCURRENT)]

    async def ask_all() -> list[Any]:
        return await asyncio.gather(*(rag.aquery(q, user=p) for q, p in asks))

    results = asyncio.run(ask_all())

    assert overlapping.is_set()
    assert len(served) == len(asks) and all(w is served[0] for w in served)
    assert len({r.trace_id for r in results}) == len(asks)
    for (question, principal), res in zip(asks, results, strict=True):
        keyword = CONCURRENT[question]
        assert keyword in res.answer and res.citations and res.pipeline["decision"] == "proceed"
        trace = rag.trace(res.trace_id, principal)
        assert trace is not None and trace["question"] == question and trace["user_id"] == principal.user_id
        assert [s["step"] for s in trace["steps"]] == STEPS
        assert step_data(trace, "retrieve")[0]["query"] == question
        calls = trace["llm_calls"]
        names = [c["name"] for c in calls]
        screened = names.count("addressee")  # none when another run scored the same paragraph first (cached)
        graded = len(calls) - screened - 1
        assert res.pipeline["llm_calls"] == len(calls) and graded >= 1 and screened in (0, 2)
        assert names == ["grade"] * graded + ["addressee"] * screened + ["generate"]  # copied lines: no judge
        assert [c["seq"] for c in calls] == list(range(1, len(calls) + 1))
        asked = [c for c in calls if c["name"] in ("grade", "generate")]  # the judge and the screen see no question
        assert all(f"Question: {question}\n" in c["messages"][-1]["content"] for c in asked)
        assert trace["result"] == res.to_dict()
    assert rag.trace(results[0].trace_id, asks[1][1]) is None  # a trace is its owner's only


def test_the_sync_api_works_inside_a_running_event_loop(make_rag: MakeRag) -> None:
    """As in Jupyter, whose own loop is running: query and stream_query run the workflow on a loop of their own."""
    generator, grader = llms()
    rag = make_rag(generator, grader)

    async def in_a_notebook() -> tuple[Any, list[Any]]:
        return rag.query(QUESTION, user=ALICE), list(rag.stream_query(QUESTION, user=ALICE))

    res, events = asyncio.run(in_a_notebook())
    assert FACT in res.answer
    assert [e.kind for e in events][:2] == ["started", "step"] and events[-1].kind == "result"
    assert events[-1].data.answer == res.answer
