"""Readers on real files: the scenario corpus, the sample corpus, and broken files made on the spot."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from pathlib import Path

import pytest
from pypdf import PdfWriter

from enterprise_rag.errors import IngestError
from enterprise_rag.ingest.readers import SUPPORTED_SUFFIXES, read_document
from enterprise_rag.schema.documents import Block, LoadedDocument
from tests.conftest import REPO

DOCS = REPO.parent / "shared" / "scenarios" / "docs"
SAMPLE = REPO / "enterprise_rag" / "sample_corpus"
PDF = DOCS / "guides" / "reflection-guide.pdf"
SAMPLE_PDF = SAMPLE / "ops" / "launch-readiness-review.pdf"
MB = 1024 * 1024

ALL_DOCS = sorted(p for p in DOCS.rglob("*") if p.is_file())
SAMPLE_DOCS = sorted(p for p in SAMPLE.rglob("*") if p.suffix in SUPPORTED_SUFFIXES)


def read(path: Path) -> LoadedDocument:
    return read_document(path, 25 * MB)


def block_with(doc: LoadedDocument, text: str) -> Block:
    found = [b for b in doc.blocks if text in b.text]
    assert found, f"no block contains {text!r}"
    return found[0]


@pytest.mark.parametrize("path", ALL_DOCS + SAMPLE_DOCS, ids=lambda p: p.name)
def test_every_document_parses(path: Path) -> None:
    doc = read(path)
    assert doc.source == str(path)
    assert doc.title.strip()
    assert doc.blocks and all(b.text.strip() for b in doc.blocks)
    assert doc.content_hash == hashlib.sha256(path.read_bytes()).hexdigest()
    if path.suffix == ".md":
        assert doc.properties["allowed_groups"], "every corpus markdown file declares its ACL"
        assert doc.properties["status"] in ("current", "superseded")


def test_supported_suffixes() -> None:
    assert {".pdf", ".md", ".markdown", ".html", ".htm", ".txt", ".text"} <= SUPPORTED_SUFFIXES


# --- Markdown ---------------------------------------------------------------------------------------


def test_front_matter_becomes_properties() -> None:
    doc = read(DOCS / "hr" / "salary-bands.md")
    assert doc.title == "Salary Bands 2025"
    assert doc.properties["allowed_groups"] == ["hr"]
    assert doc.properties["status"] == "current"
    assert doc.properties["version"] == "2025.1"
    assert doc.properties["effective_date"] == dt.date(2025, 1, 1)
    assert doc.properties["classification"] == "confidential"
    old = read(DOCS / "billing" / "refund-policy-2023.md")
    assert old.properties["status"] == "superseded"
    assert old.properties["superseded_by"] == "docs/billing/refund-policy-2025.md"


def test_markdown_headings_nest_and_title_heading_is_not_repeated() -> None:
    doc = read(DOCS / "billing" / "refund-policy-2025.md")
    assert doc.title == "Refund Policy"
    annual = block_with(doc, "within 30 days of the renewal date")
    assert annual.heading_path == ("6. Subscription terms", "6.2 Annual plans")
    assert block_with(doc, "pro-rated").heading_path == annual.heading_path
    assert block_with(doc, "chargeback with their card issuer").heading_path == ("7. Disputes and chargebacks",)
    assert all("Refund Policy (2025)" not in b.heading_path for b in doc.blocks)
    intro = block_with(doc, "This document is the current refund policy")
    assert intro.heading_path == ()


def test_markdown_lists_tables_code_and_quotes_are_single_blocks() -> None:
    salary = read(DOCS / "hr" / "salary-bands.md")
    table = block_with(salary, "Associate Engineer")
    assert table.kind == "table" and table.heading_path == ("2. Engineering",)
    assert "Distinguished Engineer" in table.text and table.text.startswith("| Level | Title |")
    quote = block_with(salary, "CONFIDENTIAL — HR ONLY")
    assert quote.kind == "paragraph" and not quote.text.startswith(">")

    kyc = read(DOCS / "compliance" / "kyc.md")
    ids = block_with(kyc, "Passport")
    assert ids.kind == "list" and "National identity card" in ids.text and "front and back" in ids.text
    assert ids.heading_path == ("3. What new account holders must submit", "3.1 Accepted photo identification")
    steps = block_with(kyc, "Confirm that the document type")
    assert steps.kind == "list" and "5. Record the outcome" in steps.text

    runbook = read(SAMPLE / "engineering" / "ground-station-runbook.md")
    code = block_with(runbook, "gsctl antenna rehome")
    assert code.kind == "code" and "gsctl selftest" in code.text


def test_markdown_paragraph_soft_breaks_are_joined() -> None:
    doc = read(DOCS / "hr" / "expenses.md")
    para = block_with(doc, "reimburses reasonable costs that employees incur while doing their jobs")
    assert "\n" not in para.text


def test_markdown_title_falls_back_to_h1_then_file_stem(tmp_path: Path) -> None:
    h1 = tmp_path / "notes.md"
    h1.write_text("# Field Notes\n\nSome text.\n\n## Part\n\nMore.\n")
    doc = read(h1)
    assert doc.title == "Field Notes"
    assert [b.heading_path for b in doc.blocks] == [(), ("Part",)]
    bare = tmp_path / "plain-notes.md"
    bare.write_text("Just a paragraph.\n")
    assert read(bare).title == "plain-notes"


# --- PDF --------------------------------------------------------------------------------------------


def test_pdf_pages_headings_and_lists() -> None:
    doc = read(PDF)
    assert doc.page_count == 7
    assert doc.title == "Engineering Reflection Practices"
    assert {b.page for b in doc.blocks} == set(range(1, 8))
    first = block_with(doc, "1. Depth of Inquiry")
    assert first.page == 4 and first.kind == "list"
    assert first.heading_path == ("4. Critical Thinking Scorecard",)
    assert "3. Assumption Surfacing" in first.text and "Lesson Capture" not in first.text
    second = block_with(doc, "4. Lesson Capture")
    assert second.page == 5 and second.kind == "list"
    assert second.heading_path == ("4. Critical Thinking Scorecard",), "headings carry across the page break"
    assert "6. Follow-Through Commitment" in second.text
    assert block_with(doc, "A private note written by one engineer").heading_path == (
        "3. Reflection formats",
        "3.1 Solo journal",
    )
    assert block_with(doc, "Six dimensions, each rated").heading_path == (
        "4. Critical Thinking Scorecard",
        "Scoring at a glance",
    )


def test_pdf_lines_of_a_paragraph_are_rejoined() -> None:
    doc = read(PDF)
    para = block_with(doc, "This guide describes the reflection practices we expect")
    assert para.kind == "paragraph" and "\n" not in para.text
    assert para.text.endswith("how useful a written reflection is.")
    assert block_with(doc, "Nothing in this guide is used").kind == "paragraph", "a list ends at the dedent"


def test_pdf_table_rows_keep_their_cells() -> None:
    table = block_with(read(PDF), "Practitioner")
    assert table.kind == "table" and table.page == 7
    assert "Total score | Band | What it usually means | Suggested next step" in table.text
    assert "18-24 | Practitioner | Solid, with one or two thin areas." in table.text


def test_pdf_without_metadata_title_inline_bold_minor_headings_and_code(tmp_path: Path) -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 20)
    pdf.multi_cell(0, 10, "Rover Maintenance Notes", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "", 11)
    body = "Wheels are checked **every week** and the suspension is greased after each dusty field trip."
    pdf.multi_cell(0, 5, body * 2, markdown=True, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)
    pdf.set_font("Helvetica", "B", 11)
    pdf.multi_cell(0, 5, "Battery care", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "", 11)
    pdf.multi_cell(0, 5, "Charge the pack to 80 percent before storage.", new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)
    pdf.set_font("Courier", "", 10)
    pdf.multi_cell(0, 5, "rover-cli battery --store\nrover-cli wheels --check", new_x="LMARGIN", new_y="NEXT")
    path = tmp_path / "rover.pdf"
    pdf.output(str(path))
    doc = read(path)
    assert doc.title == "Rover Maintenance Notes"
    assert not any("Rover Maintenance Notes" in b.text for b in doc.blocks)
    para = block_with(doc, "Wheels are checked every week")
    assert para.kind == "paragraph" and "|" not in para.text, "an inline bold run is not a table cell"
    assert block_with(doc, "Charge the pack").heading_path == ("Battery care",)
    code = block_with(doc, "rover-cli battery --store")
    assert code.kind == "code" and code.text == "rover-cli battery --store\nrover-cli wheels --check"


def test_sample_pdf_drops_running_footer_and_splits_list_by_page() -> None:
    doc = read(SAMPLE_PDF)
    assert doc.page_count == 3
    assert not any("Launch Readiness Review Guide - page" in b.text for b in doc.blocks)
    staffing, contingency = block_with(doc, "6. Operations staffing"), block_with(doc, "7. Contingency procedures")
    assert (staffing.page, contingency.page) == (2, 3)
    assert staffing.heading_path == contingency.heading_path == ("3. Go/No-Go criteria",)


# --- HTML and plain text ----------------------------------------------------------------------------

HTML = """<!doctype html><html><head><title>Widget Guide</title><style>p {color: red}</style></head>
<body><nav><a href="/">Home</a> <a href="/x">Menu item</a></nav><header>Site banner</header>
<main><h1>Widget Guide</h1><p>Widgets are <b>small</b> and
useful.</p><h2>Setup</h2><p>Plug it in.</p><ul><li>Red cable</li><li>Blue cable<ul><li>spare</li></ul></li></ul>
<h3>Limits</h3><table><tr><th>Model</th><th>Watts</th></tr><tr><td>W1</td><td>40</td></tr></table>
<script>alert("x")</script><h2>Care</h2><pre>clean --gently</pre></main><footer>Copyright</footer></body></html>"""


def test_html_main_content_headings_lists_tables(tmp_path: Path) -> None:
    path = tmp_path / "guide.html"
    path.write_text(HTML, encoding="utf-8")
    doc = read(path)
    assert doc.title == "Widget Guide"
    text = "\n".join(b.text for b in doc.blocks)
    for chrome in ("Menu item", "Site banner", "Copyright", "alert", "color: red"):
        assert chrome not in text
    assert block_with(doc, "Widgets are small and useful.").heading_path == ()
    lst = block_with(doc, "Red cable")
    assert lst.kind == "list" and lst.heading_path == ("Setup",) and "  - spare" in lst.text
    table = block_with(doc, "Model | Watts")
    assert table.kind == "table" and "W1 | 40" in table.text and table.heading_path == ("Setup", "Limits")
    assert block_with(doc, "clean --gently").heading_path == ("Care",)


def test_html_article_header_is_kept_but_page_header_dropped(tmp_path: Path) -> None:
    path = tmp_path / "post.htm"
    path.write_text(
        "<html><body><header>Site banner</header><article><header><h1>Launch Day</h1></header>"
        "<p>We launched.</p><h2>Next</h2><p>More launches.</p></article></body></html>"
    )
    doc = read(path)
    assert doc.title == "Launch Day"
    assert [(b.text, b.heading_path) for b in doc.blocks] == [("We launched.", ()), ("More launches.", ("Next",))]


def test_plain_text_title_paragraphs_and_headings(tmp_path: Path) -> None:
    path = tmp_path / "release.txt"
    path.write_text("Release Notes\n\nFaster sync.\nFewer crashes.\n\n1. Upgrading\n\nRun the installer.\n\n- a\n- b\n")
    doc = read(path)
    assert doc.title == "Release Notes"
    assert block_with(doc, "Faster sync.").heading_path == ()
    assert block_with(doc, "Run the installer.").heading_path == ("1. Upgrading",)
    assert block_with(doc, "- a").kind == "list"
    untitled = tmp_path / "log.txt"
    untitled.write_text("This file starts with a sentence.\n")
    assert read(untitled).title == "log"


# --- refusals ---------------------------------------------------------------------------------------


def _pdf(tmp_path: Path, name: str, pages: int = 1, password: str | None = None) -> Path:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(200, 200)
    if password is not None:
        writer.encrypt(password)
    path = tmp_path / name
    with path.open("wb") as fh:
        writer.write(fh)
    return path


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


BAD_FILES = {
    "unsupported": (lambda t: _write(t, "memo.odt", b"PK\x03\x04 not really"), ["unsupported", ".odt"]),
    "empty": (lambda t: _write(t, "empty.md", b""), ["empty"]),
    "whitespace": (lambda t: _write(t, "blank.txt", b" \n\n\t \n"), ["no extractable text"]),
    "binary": (lambda t: _write(t, "image.md", b"# Title\n\x89PNG\x00\x00\x1a"), ["binary", "NUL"]),
    "bad-utf8": (lambda t: _write(t, "latin1.txt", "Caf\u00e9 cr\u00e8me".encode("latin-1")), ["UTF-8", "0xe9"]),
    "bad-utf8-html": (lambda t: _write(t, "page.html", b"<p>na\xefve</p>"), ["UTF-8"]),
    "corrupt-pdf": (lambda t: _write(t, "broken.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 8), ["corrupt"]),
    "not-a-pdf": (lambda t: _write(t, "fake.pdf", b"<html>hello</html>"), ["not a PDF"]),
    "encrypted-pdf": (lambda t: _pdf(t, "locked.pdf", password="s3cret"), ["encrypted"]),
    "zero-page-pdf": (lambda t: _pdf(t, "nothing.pdf", pages=0), ["no pages"]),
    "textless-pdf": (lambda t: _pdf(t, "scan.pdf"), ["no extractable text"]),
    "bad-yaml": (
        lambda t: _write(t, "bad.md", b"---\ntitle: [unclosed\nstatus: current\n---\n# Hi\n\ntext\n"),
        ["invalid YAML front-matter", "line"],
    ),
    "yaml-not-mapping": (
        lambda t: _write(t, "list.md", b"---\n- just\n- a list\n---\n\ntext\n"),
        ["front-matter must be a YAML mapping", "list"],
    ),
    "unclosed-front-matter": (lambda t: _write(t, "open.md", b"---\ntitle: x\n\ntext\n"), ["never closed"]),
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_bad_files_are_refused_with_path_and_reason(kind: str, tmp_path: Path) -> None:
    make, words = BAD_FILES[kind]
    path = make(tmp_path)
    with pytest.raises(IngestError) as caught:
        read(path)
    assert caught.value.path == str(path)
    for word in words:
        assert word.lower() in caught.value.reason.lower(), caught.value.reason
    assert str(path) in str(caught.value)


def test_oversize_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.txt"
    with path.open("wb") as fh:  # sparse: 52 MB on paper, nothing on disk
        fh.truncate(52 * MB)
    with pytest.raises(IngestError) as caught:
        read_document(path, 25 * MB)
    assert caught.value.reason == "file is 52.0 MB, over the 25 MB limit"
    small = _write(tmp_path, "note.txt", b"x" * 2048)
    with pytest.raises(IngestError, match="over the 1.0 KB limit|over the 1 KB limit"):
        read_document(small, 1024)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="no such file"):
        read(tmp_path / "gone.md")


def test_utf8_bom_and_crlf_are_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path, "win.md", "\ufeff---\r\ntitle: Windows\r\n---\r\n\r\nLine one\r\nline two\r\n".encode())
    doc = read(path)
    assert doc.title == "Windows" and doc.blocks[0].text == "Line one line two"


def test_reading_is_deterministic() -> None:
    a, b = read(PDF), read(PDF)
    assert a == b
    assert os.path.getsize(PDF) > 0


def test_sample_manifest_matches_the_corpus() -> None:
    import yaml

    manifest = yaml.safe_load((SAMPLE / "manifest.yaml").read_text())
    listed = {d["path"]: d["allowed_groups"] for d in manifest["documents"]}
    assert set(listed) == {str(p.relative_to(SAMPLE)) for p in SAMPLE_DOCS}
    for rel, groups in listed.items():
        doc = read(SAMPLE / rel)
        if rel.endswith(".md"):
            assert doc.properties["allowed_groups"] == groups, "front-matter and manifest agree"
        else:
            assert "allowed_groups" not in doc.properties, "the PDF's ACL lives only in the manifest"
    questions = manifest["questions"]
    assert 4 <= len(questions) <= 6
    assert any(q["expected_sources"] == [] for q in questions), "one question the corpus cannot answer"
    for q in questions:
        assert q["question"].strip() and q["asked_by"]["user_id"] and q["asked_by"]["groups"]
        for source in q["expected_sources"]:
            assert source in listed
            assert set(q["asked_by"]["groups"]) & set(listed[source]), f"{q['id']}: asker can read {source}"


def test_markdown_list_items_wrapped_over_lines_are_one_line_each(tmp_path: Path) -> None:
    """A hard-wrapped item reads as one line (its continuation is no sentence of its own); nested items, hard
    breaks, a second paragraph and code inside an item keep their lines."""
    path = tmp_path / "wrapped.md"
    path.write_text(
        "# Leave\n\n"
        "- Parental leave is described in the separate Family Leave Guide on the HR\n  portal.\n"
        "- Book leave two weeks ahead for absences longer\nthan three days.\n"
        "  - A nested item that wraps\n    onto a second line.\n"
        "- A hard break here  \n  keeps its line.\n\n"
        "  A second paragraph of the item.\n"
        "- Run:\n  ```\n  gsctl stop\n  gsctl start\n  ```\n"
    )
    (items,) = [b for b in read(path).blocks if b.kind == "list"]
    assert items.text.splitlines() == [
        "- Parental leave is described in the separate Family Leave Guide on the HR portal.",
        "- Book leave two weeks ahead for absences longer than three days.",
        "  - A nested item that wraps onto a second line.",
        "- A hard break here",
        "  keeps its line.",
        "  A second paragraph of the item.",
        "- Run:",
        "  ```",
        "  gsctl stop",
        "  gsctl start",
        "  ```",
    ]
