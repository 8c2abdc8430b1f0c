"""The scenario suite's matching rules (../shared/scenarios/README.md), shared by acceptance tests."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"), "-")
_QUOTES = {ord("\u2018"): "'", ord("\u2019"): "'", ord("\u201c"): '"', ord("\u201d"): '"'}
NOT_FOUND_PHRASES = ("could not find", "not in the", "no information", "unable to find", "don't have",
                     "do not mention", "not specified")  # fmt: skip


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_DASHES).translate(_QUOTES)
    text = re.sub(r"\s+", " ", text).strip().lower()
    return re.sub(r"(\d)\s*-\s*(\d)", r"\1-\2", text)


def contains(haystack: str, item: str | Sequence[str]) -> bool:
    """``item`` may be a list of alternatives; any one counts."""
    options = [item] if isinstance(item, str) else list(item)
    hay = normalise(haystack)
    return any(normalise(o) in hay for o in options)


def source_matches(source: str | None, wanted: Iterable[str]) -> bool:
    src = (source or "").replace("\\", "/")
    return any(src.endswith(w) for w in wanted)


def is_not_found(answer: str, pipeline: dict[str, Any]) -> bool:
    return bool(pipeline.get("flagged_for_review")) or any(p in normalise(answer) for p in NOT_FOUND_PHRASES)


def answer_failures(
    case: dict[str, Any], answer: str, pipeline: dict[str, Any], cited: Sequence[str | None]
) -> list[str]:
    """Every answer expectation of one scenario case that the result misses (empty: the case passes)."""
    expect, failures = case["expect"], []
    failures += [f"missing {i!r}" for i in expect.get("answer_contains_all", []) if not contains(answer, i)]
    if "answer_contains_any" in expect and not any(contains(answer, i) for i in expect["answer_contains_any"]):
        failures.append(f"none of {expect['answer_contains_any']!r}")
    failures += [f"contains excluded {i!r}" for i in expect.get("answer_excludes", []) if contains(answer, i)]
    if "cites_sources_any" in expect and not any(source_matches(s, expect["cites_sources_any"]) for s in cited):
        failures.append(f"cites {list(cited)!r}, none of {expect['cites_sources_any']!r}")
    if "decision_in" in expect and pipeline["decision"] not in expect["decision_in"]:
        failures.append(f"decision {pipeline['decision']!r} not in {expect['decision_in']!r}")
    if expect.get("not_found") and not is_not_found(answer, pipeline):
        failures.append("not a not-found answer")
    return failures
