"""Scripted LLM replies and a small corpus for workflow tests: what the fake grader and generator answer."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from enterprise_rag import Principal
from enterprise_rag.config import WorkflowSettings
from enterprise_rag.llm import prompts
from enterprise_rag.testing import ScriptedLLM, TokenProbabilities, written_for_readers, yes_probability
from enterprise_rag.text import terms

ALICE = Principal(user_id="alice", groups=["all-staff"])


QUESTION = "How many days of paid vacation does an employee get per year?"


FACT = "27 days"


# The vacation fact restated, not copied word for word from its line: a sentence the support judge is asked about.
RESTATED = "An employee receives 27 days of paid vacation per calendar year."


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
    """The evidence a 'grade' prompt asks about (a line or a list, under its heading)."""
    return prompts.graded_line(messages)


def sources_in(messages: list[Any]) -> dict[str, str]:
    """The numbered sources of a prompt's system message, by label (S1..Sn)."""
    return prompts.sources_of(messages[0].content)


def sentence_with(text: str, keyword: str) -> str:
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        if keyword.lower() in sentence.lower():
            return sentence.strip().rstrip(".")
    raise AssertionError(f"{keyword!r} not in {text!r}")


# ---- scripted handlers ------------------------------------------------------------------------------------
def grade_yes_if(keyword: str) -> Handler:
    """A certain 'yes' (p(yes) = 1) for evidence containing ``keyword``, else a certain 'no'."""

    def handler(messages: list[Any], kwargs: dict[str, Any]) -> TokenProbabilities:
        return yes_probability(1.0 if keyword.lower() in passage_in(messages).lower() else 0.0)

    return handler


def grade_all(p_yes: float) -> Handler:
    """Every unit of evidence gets the same p(yes)."""

    def handler(messages: list[Any], kwargs: dict[str, Any]) -> TokenProbabilities:
        return yes_probability(p_yes)

    return handler


GRADE_NO = grade_all(0.0)
# Between the (partial, yes) thresholds a grader model without fitted ones gets (the scripted model's).
P_PARTIAL = sum(WorkflowSettings().grade_thresholds_fallback) / 2
GRADE_PARTIAL = grade_all(P_PARTIAL)


def grade_partial_but_yes_when(answers: Callable[[str], bool]) -> Handler:
    """Weak evidence whose verified answer answers: partial for every text, a certain yes for one ``answers``
    accepts (the answer put to the grader on weak evidence)."""

    def handler(messages: list[Any], kwargs: dict[str, Any]) -> TokenProbabilities:
        return yes_probability(1.0 if answers(passage_in(messages)) else P_PARTIAL)

    return handler


def reply(lines: dict[int, str], written: dict[int, str]) -> dict[str, str]:
    """A generator reply to a prompt listing ``lines``: the sentence ``written`` from each line, "" for the rest."""
    return {f"L{n}": written.get(n, "") for n in lines}


def answer_with(keyword: str) -> Handler:
    """The sentence of the first listed line holding ``keyword``, copied from it; else a refusal in the first
    line's place (a generator with no refusal option still writes one)."""

    def handler(messages: list[Any], kwargs: dict[str, Any]) -> dict[str, str]:
        lines = prompts.listed_lines(messages)
        number = next((n for n, text in lines.items() if keyword.lower() in text.lower()), None)
        if number is None:
            return reply(lines, {next(iter(lines)): REFUSAL})
        return reply(lines, {number: f"{sentence_with(lines[number], keyword)}."})

    return handler


REFUSAL = "I could not find this information in the documents."


def writes(*texts: str) -> Handler:
    """The given texts as the sentences of the listed lines, in order (one line each)."""

    def handler(messages: list[Any], kwargs: dict[str, Any]) -> dict[str, str]:
        lines = prompts.listed_lines(messages)
        assert len(texts) <= len(lines), f"{len(texts)} sentences for the lines {lines}"
        return reply(lines, dict(zip(lines, texts, strict=False)))

    return handler


def supported_if_stated(messages: list[Any], kwargs: dict[str, Any]) -> TokenProbabilities:
    """A judge that says yes when every content word of the statement is in its lines."""
    statement = prompts.statement_of(messages)
    lines = " ".join(prompts.listed_lines(messages).values())
    wanted = set(terms(statement))
    return yes_probability(1.0 if wanted and wanted <= set(terms(lines)) else 0.0)


def support_all(p_yes: float) -> Handler:
    def handler(messages: list[Any], kwargs: dict[str, Any]) -> TokenProbabilities:
        return yes_probability(p_yes)

    return handler


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
    grade: Any = None, generate: Any = None, support: Any = supported_if_stated, **more: Any
) -> tuple[ScriptedLLM, ScriptedLLM]:
    """(generator, grader) with the usual handlers; ``more`` adds grader tasks (rewrite, standalone) and revise."""
    generate = generate or answer_with(FACT)
    gen_handlers = {"generate": generate, "revise": more.pop("revise", generate)}
    grader_handlers = {"grade": grade or grade_yes_if(FACT), "support": support,
                       "rewrite": "paid vacation days per calendar year", "addressee": written_for_readers,
                       **more}  # fmt: skip
    return ScriptedLLM(gen_handlers), ScriptedLLM(grader_handlers)
