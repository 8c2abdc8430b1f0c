"""Context refinement: strips of kept sources that do not bear on the question are dropped.

Runs with the real local embedding model; page, source and label stay with each source.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from enterprise_rag.answer.sources import refine, rows_in_range, sections_named_as_asked
from enterprise_rag.schema.sources import Source

BANDS = """Use the total to decide what to do with a reflection.

Total score | Band | Suggested next step
25-30 | Trailblazer | Share it widely.
18-24 | Practitioner | Strengthen your lowest dimension, then share.
12-17 | Apprentice | Revise with a peer before sharing.
6-11 | Starter | Rewrite using the pair format."""

FEES = """| Amount | Fee |
| --- | --- |
| $0 - $500 | none |
| $501 - $5,000 | 1% |
| $5,001 - $50,000 | 0.5% |"""


CODES = """## E-4120 — Daily transfer limit exceeded
**Fix.** Request a temporary limit increase with form LD-7.
**Escalate** to the Limits Desk if the payment is time-critical.

## E-5003 — Upstream network timeout
**Escalate** if the status page shows no incident and fifty timeouts are logged.

## Reporting a new code
Capture the request ID and open a ticket."""


def source(text: str, label: str = "S1") -> Source:
    return Source(label=label, text=text, source="guide.pdf", page=6, title="Guide", breadcrumb="Guide > Bands",
                  effective_date=None, status="current", document_id="guide")  # fmt: skip


def test_a_number_in_the_question_keeps_only_the_range_rows_holding_it() -> None:
    text, dropped = rows_in_range("My reflection scored 21. Which band is that?", BANDS)
    assert dropped == 3
    assert "18-24 | Practitioner" in text and "Apprentice" not in text and "Trailblazer" not in text
    assert "Total score | Band" in text and text.startswith("Use the total")  # header and prose stay


def test_markdown_tables_with_currency_and_thousands_are_cut_too() -> None:
    text, dropped = rows_in_range("What is the fee on a $2,400 transfer?", FEES)
    assert dropped == 2 and "| $501 - $5,000 | 1% |" in text and "| --- | --- |" in text


def test_tables_are_left_whole_without_a_number_or_a_matching_row() -> None:
    assert rows_in_range("Which bands are there?", BANDS) == (BANDS, 0)
    assert rows_in_range("What did the 2024 review change?", BANDS) == (BANDS, 0)  # 2024 is in no range
    two_tables = f"{BANDS}\n\nRatings\n\nRating | Meaning\n1-2 | weak\n3-5 | strong"
    text, dropped = rows_in_range("I scored 21 in total", two_tables)
    assert dropped == 3 and "1-2 | weak" in text and "3-5 | strong" in text  # the other table has no hit


def test_refine_drops_range_rows_and_unrelated_paragraphs_keeping_the_source(embed_model: Any) -> None:
    noise = "The cafeteria serves breakfast from seven until ten on weekdays."
    sources = [source(f"{BANDS}\n\n{noise}")]
    refined, dropped = refine("My reflection scored 21 on the scorecard. Which band is that?", sources,
                              embed_model, floor=0.1)  # fmt: skip
    (s,) = refined
    assert "Practitioner" in s.text and "Apprentice" not in s.text and noise not in s.text
    assert dropped == 4 and (s.label, s.page, s.source) == ("S1", 6, "guide.pdf")
    assert sources[0].text.endswith(noise)  # the caller's sources are not changed


def test_the_corpus_source_closest_to_the_question_becomes_s1_and_web_sources_stay_last(embed_model: Any) -> None:
    connecting = source("Enter your SSO password. The VPN uses the same password as your email.", "S1")
    before = source("There is no shared VPN password. Every connection is tied to one person's account.", "S2")
    web = replace(source("A shared VPN password is common in small offices.", "S3"), kind="web")
    refined, _ = refine("What is the shared VPN password?", [connecting, web, before], embed_model, floor=0.1)
    assert [(s.label, s.kind, s.text[:14]) for s in refined] == [
        ("S1", "corpus", "There is no sh"), ("S2", "corpus", "Enter your SSO"), ("S3", "web", "A shared VPN p"),
    ]  # fmt: skip


def test_sections_headed_by_another_identifier_than_the_asked_one_are_dropped() -> None:
    text, dropped = sections_named_as_asked("What should I tell a customer who sees E-4120?", CODES)
    assert dropped == 1 and "E-5003" not in text and "status page" not in text
    assert "form LD-7" in text and "time-critical" in text and "## Reporting a new code" in text


def test_sections_stay_when_no_heading_names_an_identifier_of_the_question() -> None:
    assert sections_named_as_asked("How do I report an error code?", CODES) == (CODES, 0)  # no identifier asked
    assert sections_named_as_asked("What does E-4102 mean?", CODES) == (CODES, 0)  # asked code has no section here
    assert sections_named_as_asked("Is form LD-7 needed for E-9999?", CODES) == (CODES, 0)  # LD-7 only in a body
