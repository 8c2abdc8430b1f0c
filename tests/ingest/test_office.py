"""Office formats (.docx, .pptx, .xlsx, .csv) along their structure, with files the tests write with the
real libraries; and PDF pages without a text layer (reported, or read by the real Tesseract)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import docx
import openpyxl
import pptx
import pytest
from docx.oxml import parse_xml
from fpdf import FPDF
from msoffcrypto.format.ooxml import OOXMLFile
from PIL import Image, ImageDraw, ImageFont
from pptx.util import Inches

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.errors import IngestError
from enterprise_rag.ingest.readers import ocr, read_document
from enterprise_rag.llm import prompts
from tests.support.workflow import grade_yes_if, llms, reply

STAFF = Principal(user_id="kim", groups=["staff"])
W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def _word(path: Path) -> Path:
    d = docx.Document()
    d.core_properties.title = "Travel Policy"
    d.add_paragraph("Travel Policy", style="Title")
    d.add_heading("Booking", 1)
    d.add_paragraph("Book trains through the travel portal.")
    d.add_heading("Hotels", 2)
    para = d.add_paragraph("Hotels cost at most 120 EUR per night")
    para._p.append(parse_xml(f'<w:del {W} w:id="1" w:author="a"><w:r><w:delText> or 90 EUR</w:delText></w:r></w:del>'))
    para._p.append(parse_xml(f'<w:ins {W} w:id="2" w:author="a"><w:r><w:t> in capital cities</w:t></w:r></w:ins>'))
    d.add_comment(para.runs, text="Ask finance about the old 75 EUR cap", author="Reviewer")
    d.add_paragraph("Book early", style="List Bullet")
    d.add_paragraph("Keep receipts", style="List Bullet")
    table = d.add_table(rows=3, cols=2)
    for r, (city, cap) in enumerate([("City", "Cap"), ("Paris", "150"), ("Rome", "130")]):
        table.cell(r, 0).text, table.cell(r, 1).text = city, cap
    d.add_heading("Meals", 1)
    d.add_paragraph("The per diem is 40 EUR.")
    d.add_paragraph("Ask your manager", style="List Number")
    d.add_paragraph("Claim within 30 days", style="List Number")
    d.save(path)
    return path


def _slides(path: Path) -> Path:
    deck = pptx.Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[1])
    first.shapes.title.text = "Q3 Results"
    body = first.placeholders[1].text_frame
    body.text = "Revenue grew 12%"
    body.add_paragraph().text = "Costs were flat"
    first.notes_slide.notes_text_frame.text = "Thank the Berlin team."
    second = deck.slides.add_slide(deck.slide_layouts[5])
    second.shapes.title.text = "Outlook"
    grid = second.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    for r, (quarter, target) in enumerate([("Quarter", "Target"), ("Q4", "5.2M")]):
        grid.cell(r, 0).text, grid.cell(r, 1).text = quarter, target
    deck.save(path)
    return path


def _workbook(path: Path, rows: int = 60) -> Path:
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Prices"
    sheet.append(["SKU", "Product", "Unit price"])
    for i in range(rows):
        sheet.append([4400 + i, f"Valve type {i}", 10 + i * 0.5])
    notes = book.create_sheet("Changes")
    notes.append(["Date", "Change"])
    notes.append([__import__("datetime").datetime(2026, 3, 1), "Prices raised 3%"])
    book.save(path)
    return path


def test_word_headings_become_breadcrumbs_lists_and_tables_stay_whole(tmp_path: Path) -> None:
    doc = read_document(_word(tmp_path / "travel.docx"), 10**7)
    assert doc.title == "Travel Policy"
    by_text = {b.text: b for b in doc.blocks}
    assert by_text["Book trains through the travel portal."].heading_path == ("Booking",)
    assert by_text["- Book early\n- Keep receipts"].kind == "list"
    table = by_text["City | Cap\nParis | 150\nRome | 130"]
    assert table.kind == "table" and table.heading_path == ("Booking", "Hotels")
    assert by_text["The per diem is 40 EUR."].heading_path == ("Meals",)
    assert by_text["1. Ask your manager\n2. Claim within 30 days"].kind == "list"


def test_word_tracked_changes_read_as_accepted_and_comments_are_not_indexed(tmp_path: Path) -> None:
    text = "\n".join(b.text for b in read_document(_word(tmp_path / "travel.docx"), 10**7).blocks)
    assert "Hotels cost at most 120 EUR per night in capital cities" in text
    assert "90 EUR" not in text and "75 EUR" not in text and "Ask finance" not in text


def test_each_slide_is_a_page_under_its_title_with_notes_as_their_own_section(tmp_path: Path) -> None:
    doc = read_document(_slides(tmp_path / "q3.pptx"), 10**7)
    assert doc.title == "Q3 Results" and doc.page_count == 2
    blocks = [(b.heading_path, b.page, b.kind, b.text) for b in doc.blocks]
    assert blocks == [
        (("Q3 Results",), 1, "list", "- Revenue grew 12%\n- Costs were flat"),
        (("Q3 Results", "Speaker notes"), 1, "paragraph", "Thank the Berlin team."),
        (("Outlook",), 2, "table", "Quarter | Target\nQ4 | 5.2M"),
    ]


def test_every_row_group_of_a_sheet_repeats_the_header_and_names_its_rows(tmp_path: Path) -> None:
    doc = read_document(_workbook(tmp_path / "prices.xlsx"), 10**7)
    prices = [b for b in doc.blocks if b.heading_path[0] == "Prices"]
    assert len(prices) >= 2 and all(b.kind == "table" for b in prices)
    assert all(b.text.split("\n")[0] == "SKU | Product | Unit price" for b in prices)
    numbered = []
    for block in prices:
        first, last = (int(n) for n in block.heading_path[1].removeprefix("rows ").split("-"))
        assert len(block.text.split("\n")) - 1 == last - first + 1
        numbered += range(first, last + 1)
    assert numbered == list(range(2, 62))  # every data row once, by its row number in the sheet
    row = next(b for b in prices if "4471 | Valve type 71" in b.text or "4459 | Valve type 59" in b.text)
    assert "4459 | Valve type 59 | 39.5" in row.text
    (changes,) = [b for b in doc.blocks if b.heading_path[0] == "Changes"]
    assert changes.heading_path == ("Changes", "row 2") and "2026-03-01 | Prices raised 3%" in changes.text


def test_a_csv_is_one_sheet_with_its_delimiter_sniffed(tmp_path: Path) -> None:
    path = tmp_path / "stock.csv"
    path.write_text("sku;name;on hand\n4471;ball valve;12\n4472;gate valve;0\n")
    (block,) = read_document(path, 10**7).blocks
    assert block.heading_path == ("rows 2-3",)
    assert block.text == "sku | name | on hand\n4471 | ball valve | 12\n4472 | gate valve | 0"


@pytest.mark.parametrize("suffix", [".docx", ".pptx", ".xlsx"])
def test_corrupt_encrypted_and_legacy_office_files_are_refused_with_the_reason(tmp_path: Path, suffix: str) -> None:
    make = {".docx": _word, ".pptx": _slides, ".xlsx": _workbook}[suffix]
    good = make(tmp_path / f"good{suffix}")
    truncated = tmp_path / f"truncated{suffix}"
    truncated.write_bytes(good.read_bytes()[:2000])
    encrypted = tmp_path / f"encrypted{suffix}"
    out = io.BytesIO()
    with good.open("rb") as fh:
        OOXMLFile(fh).encrypt("s3cret", out)
    encrypted.write_bytes(out.getvalue())
    legacy = tmp_path / f"legacy{suffix}"
    legacy.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(4096))
    reasons = {}
    for path in (truncated, encrypted, legacy):
        with pytest.raises(IngestError) as info:
            read_document(path, 10**7)
        assert info.value.path == str(path)
        reasons[path.stem] = info.value.reason
    assert reasons["truncated"].startswith("corrupt or unreadable")
    assert "password-protected" in reasons["encrypted"]
    assert "legacy binary Office file" in reasons["legacy"]


def _price_of_4471(messages: list[Any], kwargs: dict[str, Any]) -> dict[str, str]:
    """The generator's reply: the price written from the listed line (a table row) of SKU 4471."""
    lines = prompts.listed_lines(messages)
    number = next(n for n, text in lines.items() if "4471 | Valve type 71" in text)
    return reply(lines, {number: "SKU 4471 (Valve type 71) has a unit price of 45.5."})


def test_a_bad_office_file_fails_alone_and_citations_carry_slide_and_sheet_rows(
    fresh_dsn: str, tmp_path: Path, embed_model: object
) -> None:
    from enterprise_rag.config import load_settings

    folder = tmp_path / "docs"
    folder.mkdir()
    _word(folder / "travel.docx")
    _slides(folder / "q3.pptx")
    _workbook(folder / "prices.xlsx", rows=120)
    (folder / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    generator, grader = llms(grade=grade_yes_if("4471"), generate=_price_of_4471)
    settings = load_settings(None, database={"dsn": fresh_dsn})
    rag = EnterpriseRAG(data_dir=tmp_path / "data", settings=settings, embed_model=embed_model,  # type: ignore[arg-type]
                        generator=generator, grader=grader)  # fmt: skip
    try:
        report = rag.ingest(folder, allowed_groups=["staff"])
        assert sorted(Path(p).name for p in report.added) == ["prices.xlsx", "q3.pptx", "travel.docx"]
        assert [(Path(f.path).name, f.reason.split(" (")[0]) for f in report.failed] == [
            ("broken.docx", "corrupt or unreadable Word document")
        ]
        texts = [h.node.get_content() for h in rag.retrieve("unit price of SKU 4471", user=STAFF, top_k=3)]
        row = next(t for t in texts if "4471 | Valve type 71 | 45.5" in t)
        assert "SKU | Product | Unit price" in row  # the row comes with its column names

        res = rag.query("What is the unit price of SKU 4471?", user=STAFF)
        (citation,) = res.citations
        assert Path(citation.source).name == "prices.xlsx" and citation.page is None
        sheet, rows = citation.section.split(" > ")
        first, last = (int(n) for n in rows.removeprefix("rows ").split("-"))
        assert sheet == "Prices" and first <= 73 <= last  # SKU 4471 is on row 73

        slide = rag.retrieve("Berlin team", user=STAFF, top_k=1)[0].node.metadata
        assert Path(slide["source"]).name == "q3.pptx" and slide["page"] == 1
    finally:
        rag.close()


# --- PDF pages without a text layer --------------------------------------------------------------------
def _scanned_pdf(path: Path) -> Path:
    """Page 1 has a text layer; pages 2 and 3 are only pictures of text, as a scanner makes them."""
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.multi_cell(0, 8, "Boiler room manual\n\nThe first page has a text layer.")
    for lines in (
        ["Boiler pressure must stay", "below 2.5 bar at all times."],
        ["Call the duty engineer", "on extension 4471."],
    ):
        image = Image.new("L", (1200, 300), 255)
        draw = ImageDraw.Draw(image)
        for i, line in enumerate(lines):
            draw.text((40, 40 + i * 70), line, fill=0, font=ImageFont.load_default(size=40))
        png = io.BytesIO()
        image.save(png, "PNG")
        pdf.add_page()
        pdf.image(png, x=10, y=10, w=180)
    pdf.output(str(path))
    return path


def test_scanned_pages_are_read_by_tesseract_and_reported(tmp_path: Path) -> None:
    assert ocr._tesseract() is not None, "Tesseract is not installed (scripts/test.sh installs Debian's tesseract-ocr)"
    doc = read_document(_scanned_pdf(tmp_path / "manual.pdf"), 10**7)
    pages = {b.page: b.text for b in doc.blocks}
    assert pages[1] == "The first page has a text layer."
    assert "2.5 bar" in pages[2] and "4471" in pages[3]
    assert doc.warnings == [f"page {n} has no text layer: its text was read by OCR" for n in (2, 3)]


def test_without_ocr_a_scanned_page_is_reported_per_file_and_the_rest_is_ingested(
    rag: EnterpriseRAG, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ocr, "_tesseract", lambda: None)  # the engine as on a machine without Tesseract
    path = _scanned_pdf(tmp_path / "manual.pdf")
    report = rag.ingest(path, allowed_groups=["staff"])
    assert report.added == [str(path)] and not report.failed
    assert [(w.path, w.message.split(" (")[0]) for w in report.warnings] == [
        (str(path), f"page {n} has no text layer") for n in (2, 3)
    ]
    assert "2 warning(s)" in report.summary()
    texts = [n.node.get_content() for n in rag.retrieve("text layer", user=STAFF, top_k=5)]
    assert any("The first page has a text layer." in t for t in texts)
