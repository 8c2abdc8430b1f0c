#!/usr/bin/env python3
"""Regenerate enterprise_rag/sample_corpus/ops/launch-readiness-review.pdf (fictional Acme Orbital guide).

Run with the project venv: ``.venv/bin/python scripts/make_sample_pdf.py``.
The layout is deliberate: the numbered Go/No-Go checklist in section 3 starts
at the bottom of page 2 and continues on page 3, and every page carries a
running footer, so the PDF reader's cross-page and page-furniture handling is
exercised. The script checks both with pypdf and exits non-zero otherwise.
Text is plain ASCII because the PDF core fonts are Latin-1 only.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

from fpdf import FPDF
from pypdf import PdfReader

CORPUS = Path(__file__).resolve().parent.parent / "enterprise_rag" / "sample_corpus"
OUT = CORPUS / "ops" / "launch-readiness-review.pdf"
TITLE = "Launch Readiness Review Guide"

CRITERIA = [
    (
        "Spacecraft health",
        "All subsystems report nominal telemetry in the final integrated test, and every "
        "open non-conformance report has been closed or formally waived by the chief engineer.",
    ),
    (
        "Ground segment",
        "At least two ground stations have completed a rehearsal pass with the flight "
        "software build that will be launched, including one pass at night.",
    ),
    (
        "Flight software freeze",
        "The flight software build has been frozen for at least ten working days, "
        "and its checksum matches the build recorded in the configuration log.",
    ),
    (
        "Licences",
        "The radio frequency licence and the operating licence are both granted in writing; a "
        "licence that is only expected to be granted is a No-Go.",
    ),
    (
        "Launch provider interface",
        "The launch provider has signed off the interface control document and the separation sequence timing.",
    ),
    (
        "Operations staffing",
        "The first-week operations rota is complete, with a named flight director and "
        "a trained backup for every shift.",
    ),
    (
        "Contingency procedures",
        "The safe-mode recovery and lost-contact procedures have each been rehearsed "
        "at least once in the simulator within the last thirty days.",
    ),
    (
        "Customer commitments",
        "Every imagery customer with a first-light deadline has been told the launch "
        "date and the earliest realistic date for first imagery.",
    ),
]

CONTENT: list[tuple[str, object]] = [
    ("title", TITLE),
    ("sub", "Acme Orbital - Mission Assurance - Edition 2 (2025)"),
    ("h", "1. Purpose"),
    (
        "p",
        "Before any Acme Orbital satellite is shipped to the launch site, a Launch Readiness Review decides "
        "whether the spacecraft, the ground network and the people who will operate them are ready. The "
        "review is deliberately sceptical: its job is to find the reasons to wait, not to confirm a date "
        "that has already been announced.",
    ),
    (
        "p",
        "This guide describes who sits on the review board, how the meeting runs, the criteria used for "
        "the Go/No-Go decision, and what happens after the decision. It applies to every satellite and to "
        "every major ground station upgrade that changes how passes are flown.",
    ),
    ("h", "2. The review board"),
    ("h", "2.1 Members"),
    (
        "p",
        "The board is chaired by the Head of Mission Assurance. Its voting members are the chief engineer, "
        "the ground segment lead, the flight operations lead and one engineer from outside the programme "
        "who has not worked on the satellite under review. The programme manager presents the evidence "
        "but does not vote.",
    ),
    ("h", "2.2 Quorum and voting"),
    (
        "p",
        "The review can only take place when all voting members, or their named deputies, are present. "
        "Each criterion is voted on separately. A single No-Go vote on any criterion is enough to postpone "
        "the launch; the board then agrees what evidence would be needed to change that vote and when it "
        "will meet again.",
    ),
    (
        "p",
        "Minutes are taken by the Mission Assurance office and circulated within one working day. The "
        "minutes record every vote, the name of each person who voted No-Go and the reason they gave.",
    ),
    ("pagebreak", None),
    ("h", "2.3 Evidence pack"),
    (
        "p",
        "The programme manager circulates the evidence pack five working days before the meeting. A pack "
        "that arrives later than that is a reason to reschedule the review, not to shorten it. The pack "
        "contains the test reports, the open risk list, the ground rehearsal results and the operations "
        "rota for the first week after launch.",
    ),
    ("h", "2.4 Meeting format"),
    (
        "p",
        "The meeting lasts at most three hours. The programme manager walks through the evidence pack "
        "criterion by criterion, and board members ask questions before each vote. Observers may attend "
        "but may not speak unless the chair invites them. If the meeting runs out of time, it is "
        "adjourned rather than hurried, and the remaining criteria are voted on at the next session.",
    ),
    (
        "p",
        "The outside engineer speaks first on every criterion. This order is intentional: the person "
        "with the least attachment to the programme is the most likely to notice a weak piece of "
        "evidence, and hearing senior voices first makes it harder to disagree.",
    ),
    ("h", "3. Go/No-Go criteria"),
    (
        "p",
        "The board votes on the eight criteria below, in this order. A criterion is Go only when its "
        "evidence is in the pack; verbal assurances in the meeting do not count.",
    ),
    ("criteria", CRITERIA),
    (
        "p",
        "If every criterion is Go, the chair signs the readiness certificate and the satellite may be "
        "shipped. The certificate is valid for thirty days; a launch slip beyond that requires a short "
        "delta review covering only what has changed.",
    ),
    ("h", "4. Readiness levels"),
    ("p", "Between reviews, programmes report their readiness each month using the levels below."),
    (
        "table",
        [
            ("Level", "Name", "Meaning"),
            ("R1", "Concept", "Design reviewed, no flight hardware yet."),
            ("R2", "Integration", "Flight hardware being assembled and tested."),
            ("R3", "Rehearsal", "Ground rehearsals under way with the launch build."),
            ("R4", "Ready", "All eight criteria expected to be Go at the review."),
        ],
    ),
    ("h", "5. After the review"),
    (
        "p",
        "A postponed launch keeps its review board. The same members reconvene when the missing evidence "
        "is available, and only the criteria that were No-Go are voted on again, unless something else "
        "has changed in the meantime.",
    ),
    (
        "p",
        "Lessons from every review are added to the Mission Assurance lessons log within two weeks, so "
        "that the next programme starts with them.",
    ),
]


class Guide(FPDF):
    def footer(self) -> None:
        self.set_y(-14)
        self.set_font("Helvetica", "", 8)
        self.cell(0, 6, f"Acme Orbital - {TITLE} - page {self.page_no()}", align="C")


def build(path: Path) -> None:
    pdf = Guide(format="A4", unit="mm")
    pdf.set_title(TITLE)
    pdf.set_author("Acme Orbital Mission Assurance")
    pdf.set_creation_date(dt.datetime(2025, 3, 1, tzinfo=dt.UTC))
    pdf.set_margins(22, 20, 22)
    pdf.set_auto_page_break(True, margin=22)
    pdf.add_page()
    width = pdf.w - pdf.l_margin - pdf.r_margin
    for kind, value in CONTENT:
        if kind == "pagebreak":
            pdf.add_page()
        elif kind == "title":
            pdf.set_font("Helvetica", "B", 22)
            pdf.multi_cell(width, 11, str(value), new_x="LMARGIN", new_y="NEXT")
        elif kind == "sub":
            pdf.set_font("Helvetica", "I", 11)
            pdf.multi_cell(width, 6, str(value), new_x="LMARGIN", new_y="NEXT")
            pdf.ln(4)
        elif kind == "h":
            pdf.ln(1)
            pdf.set_font("Helvetica", "B", 14)
            pdf.multi_cell(width, 8, str(value), new_x="LMARGIN", new_y="NEXT")
            pdf.ln(1)
        elif kind == "p":
            pdf.set_font("Helvetica", "", 12)
            pdf.multi_cell(width, 6.2, str(value), new_x="LMARGIN", new_y="NEXT")
            pdf.ln(2.5)
        elif kind == "criteria":
            for number, (name, text) in enumerate(value, start=1):  # type: ignore[arg-type]
                pdf.set_font("Helvetica", "B", 12)
                pdf.multi_cell(width, 6.6, f"{number}. {name}", new_x="LMARGIN", new_y="NEXT")
                pdf.set_font("Helvetica", "", 12)
                pdf.set_x(pdf.l_margin + 5)
                pdf.multi_cell(width - 5, 6.2, text, new_x="LMARGIN", new_y="NEXT")
                pdf.ln(2)
        elif kind == "table":
            pdf.set_font("Helvetica", "", 11)
            with pdf.table(col_widths=(18, 32, 116), text_align="LEFT", line_height=6) as table:
                for row in value:  # type: ignore[attr-defined]
                    cells = table.row()
                    for cell in row:
                        cells.cell(cell)
            pdf.ln(4)
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))


def verify(path: Path) -> None:
    pages = [" ".join((p.extract_text() or "").split()) for p in PdfReader(path).pages]
    if not 3 <= len(pages) <= 4:
        sys.exit(f"expected 3-4 pages, got {len(pages)}")
    where = {n: next((i + 1 for i, t in enumerate(pages) if f"{n}. {name}" in t), None)
             for n, (name, _) in enumerate(CRITERIA, start=1)}  # fmt: skip
    if where[1] is None or where[len(CRITERIA)] is None or where[1] == where[len(CRITERIA)]:
        sys.exit(f"the Go/No-Go list must cross a page boundary, found items on pages {where}")
    if path.stat().st_size > 100_000:
        sys.exit(f"{path} is {path.stat().st_size} bytes; keep it under 100 KB")
    print(f"verified: {len(pages)} pages, checklist items on pages {sorted(set(where.values()))}")  # noqa: T201


if __name__ == "__main__":
    build(OUT)
    verify(OUT)
    print("wrote", OUT)  # noqa: T201
