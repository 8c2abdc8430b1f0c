"""Hierarchical chunking on real documents with the real cl100k tokenizer."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from enterprise_rag.ingest.chunking import build_chunks
from enterprise_rag.ingest.readers import SUPPORTED_SUFFIXES, read_document
from enterprise_rag.schema.documents import Block, Chunk, LoadedDocument, heading_path_at
from tests.conftest import REPO

DOCS = REPO.parent / "shared" / "scenarios" / "docs"
SAMPLE = REPO / "enterprise_rag" / "sample_corpus"
ALL_DOCS = sorted(p for p in DOCS.rglob("*") if p.is_file()) + sorted(
    p for p in SAMPLE.rglob("*") if p.suffix in SUPPORTED_SUFFIXES
)
DEFAULT = [1024, 384, 128]
SIZES = [DEFAULT, [2048, 512, 128], [512, 128, 48], [256]]


@pytest.fixture(scope="module")
def count() -> Callable[[str], int]:
    from llama_index.core.utils import get_tokenizer

    tokenizer = get_tokenizer()
    return lambda text: len(tokenizer(text))


def chunks_of(path: Path, count: Callable[[str], int], sizes: list[int] = DEFAULT) -> list[Chunk]:
    return build_chunks(read_document(path, 25 * 1024 * 1024), "doc-1", sizes, 16, count)


def leaves_with(chunks: list[Chunk], text: str) -> list[Chunk]:
    found = [c for c in chunks if c.is_leaf and text in c.text]
    assert found, f"no leaf contains {text!r}"
    return found


def ancestors(chunk: Chunk, by_id: dict[str, Chunk]) -> list[Chunk]:
    out = []
    while chunk.parent_id is not None:
        chunk = by_id[chunk.parent_id]
        out.append(chunk)
    return out


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("path", ALL_DOCS, ids=lambda p: p.name)
def test_hierarchy_invariants(path: Path, sizes: list[int], count: Callable[[str], int]) -> None:
    doc = read_document(path, 25 * 1024 * 1024)
    chunks = build_chunks(doc, "doc-1", sizes, 16, count)
    by_id = {c.chunk_id: c for c in chunks}
    assert len(by_id) == len(chunks), "chunk ids are unique"
    last = len(sizes) - 1
    children = Counter(c.parent_id for c in chunks)
    for level in range(len(sizes)):
        assert sorted(c.position for c in chunks if c.level == level) == list(
            range(sum(1 for c in chunks if c.level == level))
        )
    breadcrumbs = {" > ".join([doc.title, *b.heading_path]) for b in doc.blocks}
    for c in chunks:
        assert c.text.strip(), "no empty or whitespace-only chunk"
        assert count(c.text) <= sizes[c.level], f"level {c.level} chunk over {sizes[c.level]} tokens"
        assert c.is_leaf == (c.level == last)
        assert c.breadcrumb.startswith(doc.title)
        if c.level == 0:
            assert c.parent_id is None
        else:
            parent = by_id[c.parent_id or ""]
            assert parent.level == c.level - 1
            for line in c.text.split("\n"):  # children's text all appears in the parent
                if line.strip() and not line.startswith("#"):
                    assert line.strip() in parent.text, line
            assert set(c.pages) <= set(parent.pages)
        if not c.is_leaf:
            assert children[c.chunk_id] >= 1, "every parent has at least one child"
        if c.is_leaf:
            assert len(ancestors(c, by_id)) == last, "a full ancestor chain up to level 0"
            assert c.breadcrumb in breadcrumbs, "a leaf never crosses a heading boundary"
    leaf_words = set().union(*(words(c.text) for c in chunks if c.is_leaf))
    assert words(" ".join(b.text for b in doc.blocks)) <= leaf_words, "leaves cover the whole document"


def test_chunk_ids_are_deterministic(count: Callable[[str], int]) -> None:
    path = DOCS / "billing" / "refund-policy-2025.md"
    first, again = chunks_of(path, count), chunks_of(path, count)
    assert [c.chunk_id for c in first] == [c.chunk_id for c in again]
    assert all(re.fullmatch(r"[0-9a-f]{32}", c.chunk_id) for c in first)
    other = build_chunks(read_document(path, 10**8), "doc-2", DEFAULT, 16, count)
    assert not {c.chunk_id for c in first} & {c.chunk_id for c in other}, "ids are scoped to the document"


def test_pdf_chunks_keep_page_numbers(count: Callable[[str], int]) -> None:
    chunks = chunks_of(DOCS / "guides" / "reflection-guide.pdf", count)
    by_id = {c.chunk_id: c for c in chunks}
    (depth,) = leaves_with(chunks, "1. Depth of Inquiry")
    (lesson,) = leaves_with(chunks, "4. Lesson Capture")
    assert depth.pages == (4,)
    assert 5 in lesson.pages
    crumb = "Engineering Reflection Practices > 4. Critical Thinking Scorecard"
    assert depth.breadcrumb == lesson.breadcrumb == crumb
    shared = [a for a in ancestors(depth, by_id) if a in ancestors(lesson, by_id)]
    assert shared, "the two halves of the list meet in a common parent"
    assert shared[0].pages == (4, 5)
    names = ["Depth of Inquiry", "Evidence Weighting", "Assumption Surfacing", "Lesson Capture"]
    names += ["Counterfactual Range", "Follow-Through Commitment"]
    assert all(n in shared[0].text for n in names), "all six dimensions arrive whole after merging"
    assert all(c.pages for c in chunks)


def test_sub_section_leaf_carries_its_heading(count: Callable[[str], int]) -> None:
    chunks = chunks_of(DOCS / "billing" / "refund-policy-2025.md", count)
    (annual,) = leaves_with(chunks, "within 30 days of the renewal date")
    assert "Annual plans" in annual.breadcrumb
    assert annual.breadcrumb == "Refund Policy > 6. Subscription terms > 6.2 Annual plans"
    assert "Annual plans" in annual.search_text and "within 30 days of the renewal date" in annual.search_text
    assert not annual.text.startswith("#"), "the heading lives in the breadcrumb, not the text"
    assert annual.pages == ()
    root = next(c for c in chunks if c.level == 0 and "renewal date" in c.text)
    assert root.breadcrumb == "Refund Policy"
    assert "### 6.2 Annual plans\nRefunds are available" in root.text, "a parent names its sub-sections inline"


def test_table_stays_whole_in_a_leaf_when_it_fits(count: Callable[[str], int]) -> None:
    path = DOCS / "hr" / "salary-bands.md"
    table = next(b for b in read_document(path, 10**8).blocks if "Associate Engineer" in b.text)
    for sizes in (DEFAULT, [1024, 512, 256]):
        if count(table.text) > sizes[-1]:
            continue
        (leaf,) = leaves_with(build_chunks(read_document(path, 10**8), "d", sizes, 16, count), "Associate Engineer")
        assert table.text in leaf.text
        assert leaf.breadcrumb == "Salary Bands 2025 > 2. Engineering"


def test_table_too_big_for_a_leaf_repeats_its_header(count: Callable[[str], int]) -> None:
    chunks = chunks_of(DOCS / "hr" / "salary-bands.md", count, [512, 128, 48])
    rows = [c for c in chunks if c.is_leaf and "| Level " in c.text and "$" in c.text]
    assert len(rows) > 3
    for leaf in rows:
        assert leaf.text.startswith("| Level | Title | Minimum | Maximum |\n| --- |"), leaf.text
    assert any("Level 7 | Distinguished Engineer" in c.text for c in rows)


def test_list_stays_whole_in_a_leaf_when_it_fits(count: Callable[[str], int]) -> None:
    chunks = chunks_of(DOCS / "compliance" / "kyc.md", count)
    (leaf,) = leaves_with(chunks, "Passport")
    assert "National identity card" in leaf.text and "Driver's license" in leaf.text


def _doc(blocks: list[Block], title: str = "Synthetic") -> LoadedDocument:
    return LoadedDocument(source="synthetic.md", title=title, blocks=blocks, content_hash="0" * 64)


def test_long_paragraph_is_split_by_sentences(count: Callable[[str], int]) -> None:
    sentences = [f"Sentence number {i} talks about topic {i * 7} in some detail." for i in range(120)]
    doc = _doc([Block(" ".join(sentences), ("Only section",))])
    chunks = build_chunks(doc, "d", [400, 100, 40], 0, count)
    leaves = [c for c in chunks if c.is_leaf]
    assert len(leaves) > 10
    for leaf in leaves:
        assert count(leaf.text) <= 40
        assert leaf.text.endswith("."), "splits fall on sentence boundaries"
        assert leaf.breadcrumb == "Synthetic > Only section"
    joined = " ".join(c.text for c in leaves)
    assert all(s in joined for s in sentences)


def test_level_zero_breaks_where_a_section_starts(count: Callable[[str], int]) -> None:
    para = "The quick brown fox jumps over the lazy dog near the river bank today. " * 6
    blocks = [Block(para, ("1. First",)), Block(para, ("1. First",)), Block(para, ("2. Second",))]
    blocks += [Block(para, ("2. Second",))]
    size0 = count(para) * 3 + 20  # room for three paragraphs: greedy packing would split section 2
    chunks = build_chunks(_doc(blocks), "d", [size0, count(para) + 5], 0, count)
    roots = [c for c in chunks if c.level == 0]
    assert [r.breadcrumb for r in roots] == ["Synthetic > 1. First", "Synthetic > 2. Second"]


def test_small_document_still_has_a_full_chain(count: Callable[[str], int]) -> None:
    chunks = build_chunks(_doc([Block("One short paragraph.", ())]), "d", DEFAULT, 16, count)
    assert [(c.level, c.text, c.is_leaf) for c in chunks] == [
        (0, "One short paragraph.", False),
        (1, "One short paragraph.", False),
        (2, "One short paragraph.", True),
    ]
    assert chunks[2].parent_id == chunks[1].chunk_id and chunks[1].parent_id == chunks[0].chunk_id
    assert chunks[0].breadcrumb == "Synthetic"


def test_single_level_makes_leaves_only(count: Callable[[str], int]) -> None:
    chunks = chunks_of(DOCS / "hr" / "expenses.md", count, [200])
    assert chunks and all(c.is_leaf and c.level == 0 and c.parent_id is None for c in chunks)


def test_whitespace_blocks_produce_no_chunks(count: Callable[[str], int]) -> None:
    assert build_chunks(_doc([Block("   \n", ())]), "d", DEFAULT, 16, count) == []


@pytest.mark.parametrize("sizes", [[], [128, 384], [128, 128], [0]])
def test_invalid_sizes_are_rejected(sizes: list[int], count: Callable[[str], int]) -> None:
    with pytest.raises(ValueError, match="chunk_sizes"):
        build_chunks(_doc([Block("x", ())]), "d", sizes, 0, count)


def test_a_passage_of_a_parent_spanning_sections_is_placed_in_its_own_section(count: Callable[[str], int]) -> None:
    blocks = [Block(f"Rule {i} of {h2} applies to every site.", ("Safety", h2)) for h2 in ("Ladders", "Cranes")
              for i in range(3)]  # fmt: skip
    doc = LoadedDocument(source="s.md", title="Manual", blocks=blocks, content_hash="x")
    chunks = build_chunks(doc, "d", [1024, 64], 0, count)
    parent = next(c for c in chunks if c.level == 0)
    assert parent.breadcrumb == "Manual > Safety" and "## Cranes" in parent.text
    common = tuple(parent.breadcrumb.split(" > ")[1:])
    for block in blocks:
        end = parent.text.index(block.text) + len(block.text)
        assert heading_path_at(parent.text, common, end) == block.heading_path
    assert heading_path_at(parent.text, common, 0) == ("Safety",)
