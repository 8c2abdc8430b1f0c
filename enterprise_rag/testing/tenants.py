"""A many-team corpus and a scripted LLM that answers from it, for load and cross-talk checks.

Team ``i`` has one document only its group may read, holding a code word no
other document contains; everyone reads one shared document. Client ``i`` asks
for team ``i``'s code word. A result is correct when it holds that team's code
and nothing from another team: any other team's code or source is cross-talk.
The scripted LLM derives every reply from the prompt it gets (question and
passages), so concurrent calls cannot borrow each other's state.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from enterprise_rag.llm.prompts import graded_line, listed_lines, statement_of
from enterprise_rag.principal import Principal
from enterprise_rag.testing.fake_llm import ScriptedLLM, TokenProbabilities, written_for_readers, yes_probability

_TEAM = re.compile(r"team (\d+)\b", re.I)


def code_word(team: int) -> str:
    return f"CODE-{team:03d}-{(team * 7919) % 10000:04d}"


def team_file(team: int) -> str:
    return f"team-{team:03d}.md"


def principal(team: int) -> Principal:
    return Principal(user_id=f"user-{team:03d}", groups=[f"team-{team:03d}", "all-staff"])


def question(team: int) -> str:
    return f"What is the code word of team {team}?"


def write_corpus(folder: Path, teams: int) -> Path:
    """One private document per team plus one shared document, ACLs in the front-matter."""
    folder.mkdir(parents=True, exist_ok=True)
    for team in range(teams):
        (folder / team_file(team)).write_text(
            f"---\ntitle: Team {team} handbook\nallowed_groups: [team-{team:03d}]\n---\n\n# Team {team} handbook\n\n"
            f"## Code word\n\nThe code word of team {team} is {code_word(team)}. Keep it inside team {team}.\n\n"
            f"## Meetings\n\nTeam {team} meets every Monday in room {100 + team}.\n",
            encoding="utf-8",
        )
    (folder / "shared.md").write_text(
        "---\ntitle: Shared handbook\nallowed_groups: [all-staff]\n---\n\n# Shared handbook\n\n"
        "## Code words\n\nEvery team keeps its own code word in its team handbook.\n",
        encoding="utf-8",
    )
    return folder


def cross_talk(team: int, texts: list[str], sources: list[str]) -> list[str]:
    """What in a result belongs to another team (empty when the result is clean)."""
    own = {team_file(team), "shared.md"}
    # basename, not Path(s).name: pathlib interns every part, and that churn of CPython's interned-string
    # table (reallocated whole, 3.7 MB in one block) read as heap growth in the soak of this check.
    problems = [f"source {os.path.basename(s)}" for s in sources if os.path.basename(s) not in own]
    for text in texts:
        problems += [f"code {c}" for c in re.findall(r"CODE-\d{3}-\d{4}", text) if c != code_word(team)]
    return problems


def _team_of(messages: list[Any]) -> int | None:
    for message in messages:
        for line in (message.content or "").splitlines():
            if line.startswith("Question:"):
                match = _TEAM.search(line)
                return int(match.group(1)) if match else None
    return None


def _grade(messages: list[Any], kwargs: dict[str, Any]) -> TokenProbabilities:
    """A certain yes for evidence holding the asking team's code word, else a certain no."""
    team = _team_of(messages)
    return yes_probability(1.0 if team is not None and code_word(team) in graded_line(messages) else 0.0)


def _answer(messages: list[Any], kwargs: dict[str, Any]) -> dict[str, str]:
    """The team's code word, written from the listed line holding it (else from the first line)."""
    team = _team_of(messages)
    lines = listed_lines(messages)
    holding = [n for n, text in lines.items() if team is not None and code_word(team) in text]
    number = (holding or list(lines))[0]
    said = f"The code word of team {team} is {code_word(team)}." if team is not None else ""
    return {f"L{n}": said if n == number else "" for n in lines}


def _support(messages: list[Any], kwargs: dict[str, Any]) -> TokenProbabilities:
    """Supported when the statement's code word is in its lines."""
    words = re.findall(r"CODE-\d{3}-\d{4}", statement_of(messages))
    lines = " ".join(listed_lines(messages).values())
    return yes_probability(1.0 if words and all(w in lines for w in words) else 0.0)


def scripted_llms() -> tuple[ScriptedLLM, ScriptedLLM]:
    """(generator, grader) that answer each team's question from the evidence in the prompt."""
    generator = ScriptedLLM({"generate": _answer, "revise": _answer})
    grader = ScriptedLLM({"grade": _grade, "support": _support, "rewrite": lambda m, k: "team code word",
                          "addressee": written_for_readers})
    return generator, grader
