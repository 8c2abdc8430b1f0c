"""Scripted LLM replies and a small corpus for workflow tests: what the fake grader and generator answer."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from enterprise_rag import Principal
from enterprise_rag.config import WorkflowSettings
from enterprise_rag.llm import prompts
from enterprise_rag.llm.prompts import NOT_FOUND_ANSWER
from enterprise_rag.testing import ScriptedLLM, TokenProbabilities, yes_probability

ALICE = Principal(user_id="alice", groups=["all-staff"])


QUESTION = "How many days of paid vacation does an employee get per year?"


FACT = "27 days"


DOCS = {
    "vacation.md": "# Vacation policy\n\nEvery employee receives 27 days of paid vacation per calendar year.\n\n"
    "Unused vacation days carry over until March 31 of the following year.\n",
    "expenses.md": "# Travel expenses\n\nMeals during business travel are reimbursed up to 60 euros per day.\n\n"
    "Receipts must be uploaded to the expense portal within 30 days of the trip.\n",
    "passwords.md": "# Password rules\n\nPasswords must be at least 14 characters long.\n\n"
    "Passwords are rotated every 180 days and are never reused.\n",
}


Handler = Callable[[list[Any], dict[str, Any]], Any]


# ---- reading the prompts ----------------------------------------------------------------------------------
def passage_in(messages: list[Any]) -> str:
    """The source a 'grade' prompt asks about."""
    return prompts.graded_source(messages)


def sources_in(messages: list[Any]) -> dict[str, str]:
    """The numbered sources of a generate / revise / check prompt, by label (S1..Sn)."""
    return prompts.sources_of(messages[0].content)


def sentence_with(text: str, keyword: str) -> str:
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        if keyword.lower() in sentence.lower():
            return sentence.strip().rstrip(".")
    raise AssertionError(f"{keyword!r} not in {text!r}")


# ---- scripted handlers ------------------------------------------------------------------------------------
def grade_yes_if(keyword: str) -> Handler:
    """A certain 'yes' (p(yes) = 1) for a passage containing ``keyword``, else a certain 'no'."""

    def handler(messages: list[Any], kwargs: dict[str, Any]) -> TokenProbabilities:
        return yes_probability(1.0 if keyword.lower() in passage_in(messages).lower() else 0.0)

    return handler


def grade_all(p_yes: float) -> Handler:
    """Every passage gets the same p(yes)."""

    def handler(messages: list[Any], kwargs: dict[str, Any]) -> TokenProbabilities:
        return yes_probability(p_yes)

    return handler


GRADE_NO = grade_all(0.0)
# Between the (partial, yes) thresholds a grader model without fitted ones gets (the scripted model's).
GRADE_PARTIAL = grade_all(sum(WorkflowSettings().grade_thresholds_fallback) / 2)


def answer_with(keyword: str) -> Handler:
    """Answer with the sentence of the first source holding ``keyword``, cited; else the not-found reply."""

    def handler(messages: list[Any], kwargs: dict[str, Any]) -> str:
        for label, text in sources_in(messages).items():
            if keyword.lower() in text.lower():
                return f"{sentence_with(text, keyword)}. [{label}]"
        return NOT_FOUND_ANSWER

    return handler


def claim_ids(kwargs: dict[str, Any]) -> list[str]:
    """The claim ids a 'check' call must give a verdict for (from its JSON schema)."""
    required = kwargs["response_format"]["json_schema"]["schema"]["required"]
    return [r for r in required if r != "answers_question"]


def check_reply(supported: bool = True, answers: bool = True) -> Handler:
    def handler(messages: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**{cid: {"supported": supported} for cid in claim_ids(kwargs)}, "answers_question": answers}

    return handler


CHECK_OK = check_reply()


def must_not_run(name: str) -> Handler:
    def handler(messages: list[Any], kwargs: dict[str, Any]) -> Any:
        raise AssertionError(f"{name} must have been replayed from the trace, not called")

    return handler


# ---- fixtures ---------------------------------------------------------------------------------------------
def write_docs(folder: Path, docs: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def llms(
    grade: Any = None, generate: Any = None, check: Any = CHECK_OK, **more: Any
) -> tuple[ScriptedLLM, ScriptedLLM]:
    """(generator, grader) with the usual handlers; ``more`` adds grader tasks (rewrite, standalone) and revise."""
    generate = generate or answer_with(FACT)
    gen_handlers = {"generate": generate, "revise": more.pop("revise", answer_with(FACT))}
    grader_handlers = {"grade": grade or grade_yes_if(FACT), "check": check,
                       "rewrite": "paid vacation days per calendar year", **more}  # fmt: skip
    return ScriptedLLM(gen_handlers), ScriptedLLM(grader_handlers)
