"""What the grader sees of a long passage: the window around its paragraph most about the question.

The grader runs on the real embedded PostgreSQL (its grade cache) with the real
local embedding model; only the grader LLM is a :class:`ScriptedLLM` that
records the prompt and answers "yes" when the answering paragraph is in it.
"""

from __future__ import annotations

import re
from typing import Any

from llama_index.core.schema import NodeWithScore, TextNode

from enterprise_rag import EnterpriseRAG
from enterprise_rag.answer.checks.grading import Grader
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.retrieval.windows import focus, paragraphs
from enterprise_rag.testing import ScriptedLLM

QUESTION = "Above what amount do I need to attach an itemised receipt to an expense claim?"
ANSWER = "An itemised receipt is required for any single cost over $25; smaller costs need a short description."
# A merged parent: its first paragraphs share more literal question words ("what", "need", "claim",
# "expense") than the answering one, which says "receipt", "itemised" and "cost" once each.
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


def test_focus_grows_the_window_around_the_most_relevant_paragraph() -> None:
    parts = paragraphs(PARENT)
    relevance = [0.1] * len(parts)
    relevance[3] = 0.9
    window = focus(QUESTION, PARENT, 400, relevance)
    assert ANSWER in window and parts[4] in window  # the anchor and its next neighbour
    assert parts[0] not in window
    # Scores that do not match the paragraphs are ignored rather than misapplied.
    assert focus(QUESTION, PARENT, 400, [0.9]) == focus(QUESTION, PARENT, 400)


def grader_prompts(rag: EnterpriseRAG, embed_model: Any) -> tuple[list[str], str]:
    """Grade PARENT (plus a short passage) once; return the grade prompts and the parent's grade."""
    prompts: list[str] = []

    def grade(messages: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        body = messages[-1].content
        prompts.append(body)
        return {
            pid: {"evidence": ANSWER[:60], "answers": "yes"}
            if ANSWER in text
            else {"evidence": "none", "answers": "no"}
            for pid, text in re.findall(r"(?ms)^\[(P\d+)\]\n(.*?)(?=^\[P\d+\]$|</passages>)", body)
        }

    caller = LLMCaller({"grader": ScriptedLLM({"grade": grade})})
    grader = Grader(rag.db, caller, floor=0.0, keep_similarity=1.0, passage_chars=400, embed_model=embed_model)
    nodes = [
        NodeWithScore(node=TextNode(id_="parent", text=PARENT, metadata={"breadcrumb": "Expense Policy"}), score=1.0),
        NodeWithScore(node=TextNode(id_="short", text="Parking permits are renewed in January."), score=0.5),
    ]
    grades = grader.grade(QUESTION, nodes)
    return prompts, grades[0].grade


def test_grader_sees_the_answering_paragraph_of_a_long_passage(rag: EnterpriseRAG, embed_model: Any) -> None:
    prompts, grade = grader_prompts(rag, embed_model)
    assert len(prompts) == 1 and ANSWER in prompts[0] and "Parking permits" in prompts[0]
    assert "## 1. Overview" not in prompts[0]
    assert grade == "yes"


def test_without_an_embedding_model_the_shared_words_window_misses_it(rag: EnterpriseRAG) -> None:
    """The baseline the dense window replaces: literal words pick the overview (why this test exists)."""
    prompts, grade = grader_prompts(rag, None)
    assert ANSWER not in prompts[0] and "## 1. Overview" in prompts[0]
    assert grade == "no"


def test_grades_cut_by_words_are_not_reused_for_dense_windows(rag: EnterpriseRAG, embed_model: Any) -> None:
    assert grader_prompts(rag, None)[1] == "no"
    prompts, grade = grader_prompts(rag, embed_model)
    assert len(prompts) == 1 and grade == "yes"  # asked again, not read from the cache


def test_a_paragraph_holding_a_code_of_the_question_is_shown_first(rag: EnterpriseRAG, embed_model: Any) -> None:
    question = "What should I tell a customer who sees E-4120 when sending a payment?"
    decoy = ("## E-4012 - Session expired\nWhat to tell a customer who sees this error when sending a payment: "
             "their session ended, so they sign in again and send the payment once more.")  # fmt: skip
    target = "## E-4120 - Daily limit exceeded\nThe account is over its daily outgoing limit; the fix is form LD-7."
    filler = "## Overview\n" + "This reference lists the codes returned by the Payments API. " * 4
    parent = "\n\n".join([filler, decoy, filler.replace("Overview", "Formats"), target])
    q = embed_model.get_query_embedding(question)
    sims = [sum(a * b for a, b in zip(q, embed_model.get_text_embedding(p), strict=True)) for p in (decoy, target)]
    assert sims[0] > sims[1]  # dense similarity alone would show the decoy: what this test guards against

    prompts: list[str] = []

    def grade(messages: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        prompts.append(messages[-1].content)
        return {"P1": {"evidence": "none", "answers": "no"}}

    grader = Grader(rag.db, LLMCaller({"grader": ScriptedLLM({"grade": grade})}), floor=0.0, keep_similarity=1.0,
                    passage_chars=300, embed_model=embed_model)  # fmt: skip
    grader.grade(question, [NodeWithScore(node=TextNode(id_="codes", text=parent), score=1.0)])
    assert target in prompts[0] and decoy not in prompts[0]


def grader_saying_no(rag: EnterpriseRAG) -> Grader:
    """A grader whose model says no to every passage, with the similarity doubt out of the way."""

    def grade(messages: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        ids = kwargs["response_format"]["json_schema"]["schema"]["required"]
        return {pid: {"evidence": "none", "answers": "no"} for pid in ids}

    return Grader(rag.db, LLMCaller({"grader": ScriptedLLM({"grade": grade})}), floor=0.0, keep_similarity=1.0,
                  passage_chars=400)  # fmt: skip


def test_a_no_on_a_passage_headed_by_the_questions_identifier_becomes_partial(rag: EnterpriseRAG) -> None:
    """Only an exact identifier in a heading overrules the grader: not a near code, not a mention in the body."""
    question = "What should I tell a customer who sees E-4120 when sending a payment?"
    passages = {
        "named": "## E-4120 - Daily transfer limit exceeded\nThe fix is a temporary limit increase with form LD-7.",
        "near": "## E-4102 - Account number failed checksum\nAsk the customer to re-enter the account number.",
        "mention": "## Reporting a new code\nCodes such as E-4120 are listed above; report any other code.",
        "crumb": "**Fix.** Ask the customer to wait for the daily limit to reset.",
    }
    nodes = [NodeWithScore(node=TextNode(id_=k, text=v), score=1.0) for k, v in passages.items()]
    nodes[3].node.metadata["breadcrumb"] = "Error Codes > E-4120 - Daily transfer limit exceeded"

    grades = {g.node_id: g for g in grader_saying_no(rag).grade(question, nodes)}
    assert {k: (g.grade, g.method) for k, g in grades.items()} == {
        "named": ("partial", "identifier"), "near": ("no", "llm"), "mention": ("no", "llm"),
        "crumb": ("partial", "identifier"),
    }  # fmt: skip
    assert "e-4120" in grades["named"].reason


def test_a_no_on_a_passage_headed_by_the_questions_acronym_becomes_partial(rag: EnterpriseRAG) -> None:
    """An acronym of the question in the title overrules a "no"; another acronym or the word in the body does not."""
    passages = {
        "titled": "## 2. Installing the client\nOpen the Company Portal and install SecureLink.",
        "other": "## SSO sign-in\nUse your single sign-on password.",
        "body": "## Working abroad\nSome countries block the VPN; ask the Service Desk first.",
    }
    nodes = [NodeWithScore(node=TextNode(id_=k, text=v), score=1.0) for k, v in passages.items()]
    nodes[0].node.metadata["breadcrumb"] = "VPN Setup Guide"

    question = "How do I set up the VPN on my new laptop?"
    grades = {g.node_id: g for g in grader_saying_no(rag).grade(question, nodes)}
    assert {k: (g.grade, g.method) for k, g in grades.items()} == {
        "titled": ("partial", "identifier"), "other": ("no", "llm"), "body": ("no", "llm"),
    }  # fmt: skip
    assert "vpn" in grades["titled"].reason
