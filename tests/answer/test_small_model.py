"""The small-model aid: which sources, cut to which window, a narrower second generation sees."""

from __future__ import annotations

from enterprise_rag.answer.checks.grading import Grade
from enterprise_rag.answer.small_model import aids_enabled, narrowed_sources
from enterprise_rag.schema.sources import Source

CODES = "\n\n".join(
    f"### AL-{code} - {meaning}\nPriority: high. First response: {action}."
    for code, meaning, action in [
        ("3170", "Analyser offline", "take a manual grab sample every 2 hours until it reports again"),
        ("3017", "Hatch intrusion", "dispatch security and inform the duty officer at once"),
        ("1370", "Mains power failure", "confirm that the generator runs, else send the on-call electrician"),
        ("3071", "Filter turbidity", "take the filter out of service and start a backwash"),
    ]
)


def source(label: str, node_id: str, text: str) -> Source:
    return Source(label=label, text=text, source=f"{node_id}.md", page=None, title="", breadcrumb="",
                  effective_date=None, status="current", document_id=node_id, node_id=node_id)  # fmt: skip


def grade(node_id: str, label: str, p_yes: float) -> Grade:
    return Grade(node_id, label, f"p(yes)={p_yes}", p_yes, "llm")  # type: ignore[arg-type]


def test_the_likeliest_sources_are_kept_most_probable_first_each_cut_to_its_window(embed_model) -> None:  # type: ignore[no-untyped-def]
    sources = [source("S1", "a", "Meals are paid up to 60 euros a day."), source("S2", "b", CODES),
               source("S3", "c", "Passwords have 14 characters."), source("S4", "d", "Badges are blue.")]  # fmt: skip
    grades = {"a": grade("a", "yes", 0.2), "b": grade("b", "yes", 0.4), "c": grade("c", "yes", 0.15),
              "d": grade("d", "partial", 0.1)}  # fmt: skip
    narrowed = narrowed_sources(sources, grades, "What do I do for alarm AL-1370?", chars=160, embed_model=embed_model)
    assert [s.node_id for s in narrowed] == ["b", "a"]
    assert "AL-1370" in narrowed[0].text and "AL-3017" not in narrowed[0].text and len(narrowed[0].text) <= 160


def test_with_none_graded_yes_the_most_probable_one_is_kept_and_nothing_to_narrow_is_none() -> None:
    sources = [source("S1", "a", "Meals are paid up to 60 euros a day."), source("S2", "b", "Badges are blue.")]
    partial = {"a": grade("a", "partial", 0.08), "b": grade("b", "partial", 0.1)}
    assert [s.node_id for s in narrowed_sources(sources, partial, "?", chars=700, embed_model=None)] == ["b"]
    assert narrowed_sources(sources[:1], partial, "?", chars=700, embed_model=None) == []


def test_auto_turns_the_aids_on_for_the_local_model_only() -> None:
    assert aids_enabled("auto", local=True) and not aids_enabled("auto", local=False)
    assert aids_enabled("on", local=False) and not aids_enabled("off", local=True)
