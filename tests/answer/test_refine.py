"""Context refinement: strips of kept sources that do not bear on the question are dropped.

Runs with the real local embedding model; page, source and label stay with each source.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from enterprise_rag.answer.sources import refine
from enterprise_rag.schema.sources import Source

BANDS = """Use the total to decide what to do with a reflection.

Total score | Band | Suggested next step
25-30 | Trailblazer | Share it widely.
18-24 | Practitioner | Strengthen your lowest dimension, then share.
12-17 | Apprentice | Revise with a peer before sharing.
6-11 | Starter | Rewrite using the pair format."""

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


def test_refine_keeps_every_table_row_and_drops_unrelated_paragraphs(embed_model: Any) -> None:
    """A question naming one number keeps the whole table: the next band is part of an answer, too."""
    noise = "The cafeteria serves breakfast from seven until ten on weekdays."
    sources = [source(f"{BANDS}\n\n{noise}")]
    refined, dropped = refine("My reflection scored 21. Which band is that, and what is the next band?", sources,
                              embed_model, floor=0.1)  # fmt: skip
    (s,) = refined
    assert s.text == BANDS and dropped == 1 and (s.label, s.page, s.source) == ("S1", 6, "guide.pdf")
    assert sources[0].text.endswith(noise)  # the caller's sources are not changed


def test_sections_about_other_identifiers_stay(embed_model: Any) -> None:
    """Which section answers is the generator's call, checked by the quotes; refinement cuts no section."""
    refined, _ = refine("What should I tell a customer who sees E-4120?", [source(CODES)], embed_model, floor=0.1)
    assert "E-5003" in refined[0].text and "form LD-7" in refined[0].text


def test_sources_keep_retrieval_order_with_web_sources_last(embed_model: Any) -> None:
    """No reordering by closeness: which lines answer is the graded evidence's call, not the source order."""
    connecting = source("Enter your SSO password. The VPN uses the same password as your email.", "S1")
    before = source("There is no shared VPN password. Every connection is tied to one person's account.", "S2")
    web = replace(source("A shared VPN password is common in small offices.", "S3"), kind="web")
    refined, _ = refine("What is the shared VPN password?", [connecting, web, before], embed_model, floor=0.1)
    assert [(s.label, s.kind, s.text[:14]) for s in refined] == [
        ("S1", "corpus", "Enter your SSO"), ("S2", "corpus", "There is no sh"), ("S3", "web", "A shared VPN p"),
    ]  # fmt: skip
