"""``ask`` (one question or an interactive chat), ``trace`` and ``demo`` commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml
from rich.table import Table

from enterprise_rag import Principal
from enterprise_rag.cli.common import (
    ConfigOpt,
    DataDirOpt,
    GroupsOpt,
    JsonOpt,
    UserOpt,
    err,
    open_rag,
    out,
    print_json,
    split_csv,
)

if TYPE_CHECKING:
    from enterprise_rag import EnterpriseRAG
    from enterprise_rag.schema.result import QueryResult

SAMPLE_CORPUS = Path(__file__).resolve().parent.parent / "sample_corpus"


def show_result(res: QueryResult) -> None:
    """Answer, citations, decision and confidence, plain-text safe."""
    out.print(res.answer, markup=False, highlight=False)
    if res.citations:
        table = Table(show_header=True, box=None)
        for column in ("", "source", "page", "section", "quote"):
            table.add_column(column, overflow="fold")  # a long path wraps, never loses its end
        for c in res.citations:
            web = " (web)" if c.kind == "web" else ""
            table.add_row(c.label, f"{c.shown_source}{web}", str(c.page or ""), c.section, c.quote[:90])
        out.print(table)
    p, e = res.pipeline, res.evaluation
    flag = "  [bold red]FLAGGED FOR REVIEW[/bold red]" if p["flagged_for_review"] else ""
    out.print(
        f"[dim]decision {p['decision']}, confidence {e['confidence']:.2f}, support {e['support']['label']}, "
        f"{p['llm_calls']} LLM calls, {p['latency_ms'] / 1000:.1f} s, trace {res.trace_id}[/dim]{flag}"
    )


def answer_live(
    rag: EnterpriseRAG, question: str, principal: Principal, history: list[dict[str, str]] | None = None
) -> QueryResult:
    """Answer while showing progress on stderr: each step as it begins and ends (with its seconds) and the
    draft as the generator writes it, marked unchecked; then the checked answer on stdout."""
    result: QueryResult | None = None
    drafting = False
    for event in rag.stream_query(question, user=principal, history=history):
        if drafting and event.kind != "draft":
            err.print()
            drafting = False
        if event.kind == "started":
            err.print(f"[dim]  {event.name} ...[/dim]")
        elif event.kind == "step":
            err.print(f"[dim]  {event.name} {event.seconds:.1f} s[/dim]")
        elif event.kind == "draft":
            if not drafting:
                err.print("[dim]  draft, not yet checked:[/dim] ", end="")
                drafting = True
            err.print(event.text, end="", markup=False, highlight=False)
        elif event.kind == "result":
            result = event.data
    assert result is not None  # a stream that ends without its result has raised
    show_result(result)
    return result


def ask_command(
    question: Annotated[
        str | None, typer.Argument(help="The question; omit it to chat (follow-ups use history).")
    ] = None,
    user: UserOpt = ...,  # type: ignore[assignment]
    groups: GroupsOpt = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question as a user: cited, checked, permission-scoped.

    Progress goes to stderr as it happens: each step with its seconds, and the
    draft as it is written (unchecked); the checked answer then goes to stdout.

    Without a question it starts a chat: each line is a question, answered with
    the conversation so far as history, so a follow-up like "and for contractors?"
    is first rewritten into a standalone question. An empty line or Ctrl-D ends
    it. With --json each answer is one line of JSON (the query payload).
    """
    principal = Principal(user, split_csv(groups))
    with open_rag(config, data_dir) as rag:
        if question is not None:
            if as_json:
                print_json(rag.query(question, user=principal).to_dict())
            else:
                answer_live(rag, question, principal)
            return
        history: list[dict[str, str]] = []
        err.print("chat mode: follow-ups use the conversation; empty line or Ctrl-D to quit", markup=False)
        while True:
            try:
                line = err.input("? ").strip()  # the prompt goes to stderr: stdout holds only answers
            except EOFError:
                break
            if not line:
                break
            if as_json:
                res = rag.query(line, user=principal, history=history)
                out.print(json.dumps(res.to_dict(), default=str), markup=False, highlight=False, soft_wrap=True)
            else:
                res = answer_live(rag, line, principal, history)
            history += [{"role": "user", "content": line}, {"role": "assistant", "content": res.answer}]


def trace_command(
    trace_id: Annotated[str, typer.Argument(help="Trace id printed with each answer.")],
    user: UserOpt = ...,  # type: ignore[assignment]
    groups: GroupsOpt = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a query's trace: steps, grades, decisions, LLM calls and timings (own traces only)."""
    with open_rag(config, data_dir) as rag:
        trace = rag.trace(trace_id, Principal(user, split_csv(groups)))
    if trace is None:
        err.print(f"no trace {trace_id} for user {user}", markup=False)
        raise typer.Exit(1)
    if as_json:
        print_json(trace)
        return
    out.print(f"{trace['question']}  [{trace['status']}]", markup=False)
    table = Table("step", "ms", "what happened")
    for s in trace["steps"]:
        summary = ", ".join(f"{k}={_short(v)}" for k, v in s["data"].items())
        table.add_row(s["step"], f"{s['ms']:.0f}", summary)
    out.print(table)
    calls = trace["llm_calls"]
    out.print(f"{len(calls)} LLM calls, {sum(c['prompt_tokens'] for c in calls)} prompt tokens "
              f"({sum(c['cached_tokens'] for c in calls)} read from the prompt cache), "
              f"{sum(c['completion_tokens'] for c in calls)} completion tokens")  # fmt: skip


def _short(value: Any, limit: int = 60) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def demo_command(
    questions: Annotated[int, typer.Option("--questions", min=0, help="How many sample questions to answer.")] = 4,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Ingest the bundled sample corpus with its ACLs and answer its sample questions as different users."""
    manifest = yaml.safe_load((SAMPLE_CORPUS / "manifest.yaml").read_text(encoding="utf-8"))
    with open_rag(config, data_dir) as rag:
        out.print(f"[bold]store[/bold] {rag.db.location}")
        for doc in manifest["documents"]:
            report = rag.ingest([SAMPLE_CORPUS / doc["path"]], allowed_groups=doc["allowed_groups"])
            outcome = (
                "failed" if report.failed else "added" if report.added else "updated" if report.updated else "unchanged"
            )
            out.print(f"  {outcome:9} {doc['path']}  groups={','.join(doc['allowed_groups'])}")
        picked = demo_questions(manifest["questions"], questions)
        for q in picked:
            who = q["asked_by"]
            out.rule(f"{who['user_id']} ({', '.join(who['groups'])}) asks")
            out.print(q["question"], markup=False)
            answer_live(rag, q["question"], Principal(who["user_id"], who["groups"]))


def demo_questions(questions: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """Answerable ones first, always including the out-of-corpus question and one permission contrast."""
    contrast = [
        {"question": q["question"], "asked_by": q["not_visible_to"]} for q in questions if q.get("not_visible_to")
    ]
    unanswerable = [q for q in questions if not q.get("expected_sources")]
    answerable = [q for q in questions if q.get("expected_sources")]
    ordered = answerable[:2] + contrast[:1] + unanswerable[:1] + answerable[2:]
    return ordered[:n]
