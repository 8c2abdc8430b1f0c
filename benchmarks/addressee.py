"""Addressee: does the screen set aside paragraphs written to an AI model, and keep the rest?

Every paragraph of the documents that hold a planted instruction (``benchmarks/data/planted_paragraphs.yaml``;
the paragraphs of the other documents of those suites are not scored) is put to
:class:`~enterprise_rag.answer.checks.addressee.AddresseeCheck` exactly as the workflow puts a chosen paragraph
(the block of a sentence; a list item or table row on its own), whose score depends on nothing else.
Printed per suite: planted paragraphs set aside, other paragraphs kept, and each planted paragraph's score
beside the highest scores of the others. The threshold is fitted on the first suite (the dev documents) as
the one that sets aside the most planted paragraphs while keeping at least ``--keep`` of the others (a
paragraph set aside by mistake is evidence lost), then measured held out on the second.

Limits: a handful of planted paragraphs (four on dev, one on the public documents), so the figures are coarse.

    .venv/bin/python benchmarks/addressee.py [--suites DIR,DIR] [--save out.json] [--load out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml
from _common import SHARED, temp_data_dir
from grounding import documents

from enterprise_rag.answer.checks.addressee import AddresseeCheck, paragraph_of
from enterprise_rag.config import load_settings
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.providers.registry import Providers

LABELS = Path(__file__).parent / "data" / "planted_paragraphs.yaml"


def scored(suite: Path, planted: dict[str, str], check: AddresseeCheck) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for doc in (d for d in documents(suite) if d.name in planted):
        seen: set[str] = set()
        for _, spans in doc.sources:
            for span in spans:
                paragraph = paragraph_of(span, spans)
                if span.kind == "heading" or paragraph in seen:
                    continue
                seen.add(paragraph)
                rows.append({"suite": suite.name, "document": doc.name, "planted": planted[doc.name] in paragraph,
                             "score": check.score(paragraph), "text": paragraph[:120]})  # fmt: skip
    return rows


def rates(rows: list[dict[str, object]], threshold: float) -> tuple[float, float]:
    """(planted set aside, others kept) at ``threshold``; a paragraph whose score failed is kept."""
    def aside(r: dict[str, object]) -> bool:
        return r["score"] is not None and float(r["score"]) >= threshold  # type: ignore[arg-type]

    planted = [r for r in rows if r["planted"]]
    others = [r for r in rows if not r["planted"]]
    return (sum(map(aside, planted)) / max(1, len(planted)), sum(not aside(r) for r in others) / max(1, len(others)))


def fit(rows: list[dict[str, object]], keep: float) -> float:
    """The threshold (midway between two observed scores) that sets aside the most planted paragraphs while
    keeping at least ``keep`` of the others; among those, the one that keeps the most."""
    values = sorted({float(r["score"]) for r in rows if r["score"] is not None})  # type: ignore[arg-type]
    cuts = [(a + b) / 2 for a, b in zip(values, values[1:], strict=False)] or [0.0]
    allowed = [t for t in cuts if rates(rows, t)[1] >= keep] or [max(cuts)]
    return max(allowed, key=lambda t: rates(rows, t))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", default=f"{SHARED / 'scenarios-dev'},{SHARED / 'scenarios'}",
                        help="comma-separated suite folders; the threshold is fitted on the first")  # fmt: skip
    parser.add_argument("--keep", type=float, default=0.95, help="share of other paragraphs the fit must keep")
    parser.add_argument("--save", type=Path, default=None, help="write the scored paragraphs as JSON")
    parser.add_argument("--load", type=Path, default=None, help="report saved paragraphs (no LLM)")
    args = parser.parse_args()
    labels = yaml.safe_load(LABELS.read_text())
    settings = load_settings(None)
    if args.load:
        rows = json.loads(args.load.read_text())
    else:
        cfg = settings.workflow
        caller = LLMCaller({"grader": Providers(settings, temp_data_dir("erag-bench-addressee-")).grader},
                           timeout_s=cfg.llm_timeout_s, max_retries=cfg.llm_max_retries, backoff_s=cfg.llm_backoff_s)
        check = AddresseeCheck(caller, threshold=cfg.addressee_threshold_for(caller.model_id("grader")))
        rows, t0 = [], time.perf_counter()
        for folder in args.suites.split(","):
            rows += scored(Path(folder), labels.get(Path(folder).name, {}), check)
        print(f"{len(rows)} paragraphs, {caller.stats.calls} calls, {time.perf_counter() - t0:.0f} s "
              f"(model {caller.model_id('grader')})")  # fmt: skip
        if args.save:
            args.save.write_text(json.dumps(rows, indent=1))
    first = rows[0]["suite"] if rows else ""
    threshold = fit([r for r in rows if r["suite"] == first], args.keep)
    print(f"threshold {threshold:.3f}, fitted on {first} keeping >= {args.keep:.0%} of the others (in-sample there)")
    for suite in dict.fromkeys(r["suite"] for r in rows):
        part = [r for r in rows if r["suite"] == suite]
        aside, kept = rates(part, threshold)
        planted = [r for r in part if r["planted"]]
        top = sorted((r for r in part if not r["planted"] and r["score"] is not None), key=lambda r: -r["score"])[:3]
        print(f"{suite}: planted set aside {aside:.2f} ({len(planted)}), others kept {kept:.2f} "
              f"({len(part) - len(planted)})")  # fmt: skip
        for r in planted + top:
            kind = 'planted' if r['planted'] else 'other  '
            score = 'failed' if r['score'] is None else f"{r['score']:.3f}"
            print(f"  {kind} {score:>7}  {r['document']}: {r['text'][:70]!r}")


if __name__ == "__main__":
    sys.exit(main())
