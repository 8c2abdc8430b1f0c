"""One ACL per document through every write interface: a node cannot bring readers of its own to a stored
document. Changing who may read a document is a named operation (``rag.set_access``) or a re-ingest."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.errors import IngestError
from enterprise_rag.schema.documents import document_id_for
from enterprise_rag.store.vector_store import PgRagVectorStore
from tests.support.ingest import assert_consistent, markdown_doc, query_rows

VECTOR = (np.ones(384) / np.sqrt(384)).tolist()
ENGINEER = Principal("erin", ["eng"])


def _node(doc_id: str, text: str, source: str, groups: list[str]) -> TextNode:
    return TextNode(
        text=text, embedding=VECTOR, metadata={"source": source, "allowed_groups": groups},
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
    )  # fmt: skip


@pytest.fixture
def salaries(rag: EnterpriseRAG, tmp_path: Path) -> Path:
    path = tmp_path / "salaries.md"
    path.write_text(markdown_doc("Salaries", "## Bands\n\nBand C starts at 61,000 euros.", allowed_groups=["hr"]))
    assert rag.ingest(path).added == [str(path)]
    return path


def _readable(rag: EnterpriseRAG, user: Principal) -> list[str]:
    return [n.node.get_content() for n in rag.retrieve("Band C salary", user=user, top_k=5)]


def test_a_vector_store_node_cannot_widen_a_stored_documents_acl(
    rag: EnterpriseRAG, fresh_dsn: str, salaries: Path
) -> None:
    doc_id = document_id_for(str(salaries))
    before = query_rows(fresh_dsn, "SELECT node_id, text, allowed_groups, xmin::text FROM rag_nodes ORDER BY 1")
    store = PgRagVectorStore(rag.db)
    with pytest.raises(IngestError) as caught:  # its own source, its own id, one more group
        store.add([_node(doc_id, "Band C starts at 61,000 euros.", str(salaries), ["hr", "eng"])])
    assert caught.value.path == str(salaries) and "set_access" in caught.value.reason
    assert query_rows(fresh_dsn, "SELECT allowed_groups FROM rag_documents") == [(["hr"],)]
    assert query_rows(fresh_dsn, "SELECT node_id, text, allowed_groups, xmin::text FROM rag_nodes ORDER BY 1") == before
    assert _readable(rag, ENGINEER) == []
    # the same ACL still replaces the document's nodes through the vector store
    store.add([_node(doc_id, "Band C starts at 62,000 euros.", str(salaries), ["hr"])])
    assert _readable(rag, Principal("harriet", ["hr"])) == ["Band C starts at 62,000 euros."]
    assert_consistent(fresh_dsn)


def test_set_access_changes_the_document_and_every_node_and_is_logged(
    rag: EnterpriseRAG, fresh_dsn: str, salaries: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert _readable(rag, ENGINEER) == []
    with caplog.at_level(logging.INFO, logger="enterprise_rag.rag"):
        assert rag.set_access(salaries, allowed_groups=["hr", "eng"]) is True
    assert "groups ['hr'] -> ['eng', 'hr']" in caplog.text and document_id_for(str(salaries)) in caplog.text
    assert query_rows(fresh_dsn, "SELECT DISTINCT allowed_groups FROM rag_nodes") == [(["eng", "hr"],)]
    assert any("61,000" in text for text in _readable(rag, ENGINEER))
    assert rag.set_access(salaries, allowed_groups=["hr"]) is True  # and back: the engineer reads nothing again
    assert _readable(rag, ENGINEER) == []
    assert_consistent(fresh_dsn)
    counted = query_rows(fresh_dsn, "SELECT allowed_groups, allowed_users, leaves FROM rag_acl_sets ORDER BY 1, 2")
    assert counted == query_rows(fresh_dsn, "SELECT allowed_groups, allowed_users, count(*) FROM rag_nodes"
                                 " WHERE is_leaf GROUP BY 1, 2 ORDER BY 1, 2")  # the per-ACL-set leaf counts followed
    with pytest.raises(IngestError, match="nobody"):
        rag.set_access(salaries, allowed_groups=[])
    assert rag.set_access("no/such/document.md", allowed_groups=["hr"]) is False


def test_ingesting_the_source_again_may_change_its_acl(rag: EnterpriseRAG, fresh_dsn: str, salaries: Path) -> None:
    salaries.write_text(markdown_doc("Salaries", "## Bands\n\nBand C starts at 63,000 euros.",
                                     allowed_groups=["hr", "eng"]))  # fmt: skip
    assert rag.ingest(salaries).updated == [str(salaries)]
    assert any("63,000" in text for text in _readable(rag, ENGINEER))
    assert_consistent(fresh_dsn)
