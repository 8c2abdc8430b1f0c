"""``enterprise-rag eval``: measure retrieval on a labelled set against the ingested store.

Registered on the app in :mod:`enterprise_rag.cli` (same exit codes: 0 success;
1 the BEIR corpus was ingested with failures; 2 bad input, one line on stderr;
3 store or model unavailable). Output: a table of metric rows by mode (or
principal) columns on stdout, or ``--json``; a progress bar on stderr when it is a terminal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.cli.common import ConfigOpt, DataDirOpt, JsonOpt, err, out, progress_bar, split_csv
from enterprise_rag.evaluation import EvalDataError, compare_table, load_beir, load_labelled_yaml, plot_recall_curve
from enterprise_rag.evaluation import corpus_eval as ce
from enterprise_rag.evaluation.corpus_eval import MODES

Opt, Arg = typer.Option, typer.Argument


def _ks(value: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in value.split(",") if k.strip()})
    except ValueError:
        ks = []
    if not ks or ks[0] < 1:
        raise typer.BadParameter(f"expected positive integers like 1,3,5,10, got {value!r}", param_hint="'--k'")
    return ks


def _modes(value: str) -> list[str]:
    modes = list(dict.fromkeys(split_csv(value) or []))
    if not modes or any(m not in MODES for m in modes):
        raise typer.BadParameter(f"expected a subset of {','.join(MODES)}, got {value!r}", param_hint="'--modes'")
    return modes


def _fmt(metric: str, value: Any) -> str:
    if value is None or isinstance(value, int):
        return "" if value is None else str(value)
    return f"{value:.1f}" if metric.startswith("latency") else f"{value:.3f}"


def eval_command(
    labelled: Annotated[Path | None, Arg(help="Questions YAML.", metavar="FILE", exists=True, dir_okay=False)] = None,
    beir: Annotated[Path | None, Opt("--beir", help="BEIR dataset folder.", exists=True, file_okay=False)] = None,
    split: Annotated[str, Opt("--split", help="BEIR split (qrels/<split>.tsv).")] = "test",
    ingest_first: Annotated[bool, Opt("--ingest", help="Ingest the BEIR corpus (ACL --groups|public).")] = False,
    limit_queries: Annotated[int | None, Opt("--limit-queries", min=1, help="Only the first N questions.")] = None,
    user: Annotated[str | None, Opt("--user", "-u", help="Principal for questions that name no user.")] = None,
    groups: Annotated[str | None, Opt("--groups", "-g", help="Comma-separated groups of --user.")] = None,
    scopes: Annotated[list[str] | None, Opt("--as", help="USER:G1,G2; repeat to compare principals.")] = None,
    modes: Annotated[str, Opt("--modes", help="Retrieval modes to compare: dense,text,hybrid.")] = "hybrid",
    ks: Annotated[str, Opt("--k", help="Cutoffs for recall@k and precision@k.")] = "1,3,5,10",
    plot: Annotated[Path | None, Opt("--plot", help="Save the recall@k curves as a PNG.")] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Measure retrieval (recall, precision, nDCG, MRR, latency) on a labelled set against the store."""
    cutoffs, mode_list = _ks(ks), _modes(modes)
    if (labelled is None) == (beir is None):
        raise EvalDataError("give either a labelled questions YAML or --beir FOLDER")
    if ingest_first and beir is None:
        raise EvalDataError("--ingest needs --beir FOLDER")
    try:
        evalset = load_beir(beir, split) if beir is not None else load_labelled_yaml(labelled)  # type: ignore[arg-type]
    except (FileNotFoundError, EvalDataError) as exc:  # YAML parser messages span lines; errors are one line
        raise EvalDataError(" ".join(str(exc).split())) from None
    if limit_queries is not None and limit_queries < len(evalset):
        evalset = evalset.subset(list(evalset.queries)[:limit_queries])
    if not len(evalset):
        raise EvalDataError(f"{evalset.name}: no question has a relevant document")
    scope_map = ce.parse_scopes(scopes or [])
    default = Principal(user, split_csv(groups)) if user else None
    unnamed = [q for q in evalset.queries if q not in evalset.users]
    if not scope_map and default is None and unnamed:
        raise EvalDataError(
            f"{len(unnamed)} of {len(evalset)} questions name no user (e.g. {unnamed[0]!r}); "
            "pass --user ID [--groups g1,g2] or --as USER:G1,G2"
        )
    result: dict[str, Any] = {"evalset": evalset.name, "num_queries": len(evalset), "ks": cutoffs, "modes": mode_list}
    with EnterpriseRAG.from_config(config, data_dir=data_dir) as rag, progress_bar() as bar:
        ingest_report = None
        if ingest_first and beir is not None:
            task = bar.add_task("ingesting", total=ce.count_beir_corpus(beir))
            ingest_report = ce.ingest_beir_corpus(
                rag, beir, split_csv(groups) or ["public"],
                progress=lambda source, outcome: bar.update(task, advance=1, description=f"{outcome}: {source}"),
            )  # fmt: skip
            bar.remove_task(task)
            result["ingest"] = ingest_report.summary()
        missing = ce.missing_labels(rag, ce.judged_labels(evalset), by_path=beir is None)
        result["missing_relevant"] = missing
        task = bar.add_task("evaluating", total=len(evalset) * len(mode_list) * max(len(scope_map), 1))
        runs = ce.run_modes(
            rag, evalset, mode_list, cutoffs, default=default, scopes=scope_map,
            progress=lambda column: bar.update(task, advance=1, description=f"evaluating {column}"),
        )  # fmt: skip
    reports = {run.column: run.report for run in runs}
    if plot is not None:
        result["plot"] = str(plot_recall_curve(reports, plot, title=f"Recall@k: {evalset.name}"))
    result["reports"] = {run.column: run.to_dict() for run in runs}
    if as_json:
        out.print_json(json.dumps(result, default=str))
    else:
        if ingest_report is not None:
            err.print(ingest_report.summary(), markup=False, highlight=False)
        if missing:
            err.print(f"warning: {len(missing)} relevant documents are not in the store, e.g. {missing[0]}",
                      markup=False, highlight=False, soft_wrap=True)  # fmt: skip
        who = {run.principal for run in runs if run.principal not in reports}
        asked = f", asked as {who.pop()}" if len(who) == 1 else ""
        asked = ", each asked by its own user" if asked == ", asked as per-question" else asked
        table = Table(title=f"{evalset.name}: {len(evalset)} questions{asked}")
        table.add_column("metric")
        for column in reports:
            table.add_column(column, justify="right")
        for row in compare_table(reports):
            table.add_row(row["metric"], *(_fmt(row["metric"], row[c]) for c in reports))
        out.print(table)
        if plot is not None:
            out.print(f"recall curve written to {result['plot']}", markup=False, highlight=False, soft_wrap=True)
    if ingest_report is not None and ingest_report.failed:
        raise typer.Exit(1)
