"""Writes through the LlamaIndex vector store: ACLs validated as on ingest, document ids kept to their source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.errors import IngestError
from enterprise_rag.schema.documents import document_id_for
from enterprise_rag.store.vector_store import PgRagVectorStore
from tests.support.ingest import assert_consistent, markdown_doc, query_rows

VECTOR = (np.ones(384) / np.sqrt(384)).tolist()


def _node(doc_id: str, text: str, **metadata: Any) -> TextNode:
    return TextNode(
        text=text, embedding=VECTOR, metadata=metadata,
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
    )  # fmt: skip


def _visible(store: PgRagVectorStore, principal: Principal) -> list[str]:
    result = store.for_principal(principal).query(VectorStoreQuery(query_embedding=VECTOR, similarity_top_k=10))
    return [n.get_content() for n in result.nodes or []]


def test_a_string_acl_is_one_name(rag: EnterpriseRAG, fresh_dsn: str) -> None:
    store = PgRagVectorStore(rag.db)
    store.add([_node("memo", "Quarterly budget figures.", source="mem://memo", allowed_groups="finance")])
    rows = query_rows(fresh_dsn, "SELECT allowed_groups, allowed_users FROM rag_documents WHERE document_id = 'memo'")
    assert rows == [(["finance"], [])]
    assert query_rows(fresh_dsn, "SELECT DISTINCT allowed_groups FROM rag_nodes") == [(["finance"],)]
    assert _visible(store, Principal("fay", ["finance"])) == ["Quarterly budget figures."]
    assert _visible(store, Principal("fred", ["f"])) == []


@pytest.mark.parametrize(
    ("acl", "words"),
    [
        ({"allowed_groups": ["finance", ""]}, ["allowed_groups", "empty"]),
        ({"allowed_groups": ["finance", 5]}, ["allowed_groups", "list of names"]),
        ({"allowed_users": ["eve\x00"]}, ["allowed_users", "cannot be stored"]),
        ({"allowed_users": ["eve\ud800"]}, ["allowed_users", "cannot be stored"]),
        ({"allowed_groups": ["x" * 5000]}, ["allowed_groups", "2048 bytes"]),
    ],
)
def test_invalid_acl_names_are_refused_and_nothing_is_written(
    rag: EnterpriseRAG, acl: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(IngestError) as caught:
        PgRagVectorStore(rag.db).add([_node("memo", "Quarterly budget figures.", source="mem://memo", **acl)])
    assert caught.value.path == "mem://memo"
    for word in words:
        assert word in caught.value.reason, caught.value.reason
    with rag.db.connection() as conn:  # migrates the fresh database if the refusal came before any write
        assert conn.execute("SELECT count(*) FROM rag_documents").fetchone() == (0,)


def test_nodes_under_another_sources_document_id_are_refused(
    rag: EnterpriseRAG, fresh_dsn: str, tmp_path: Path
) -> None:
    path = tmp_path / "salaries.md"
    path.write_text(markdown_doc("Salaries", "## Bands\n\nBand C starts at 61,000.", allowed_groups=["hr"]))
    assert rag.ingest(path).added == [str(path)]
    doc_id = document_id_for(str(path))
    before = query_rows(fresh_dsn, "SELECT node_id, text, allowed_groups, xmin::text FROM rag_nodes ORDER BY 1")
    store = PgRagVectorStore(rag.db)

    with pytest.raises(IngestError) as caught:
        store.add([_node(doc_id, "Band C starts at 1.", source="mem://forged", allowed_groups=["all-staff"])])
    assert caught.value.path == "mem://forged"
    assert doc_id in caught.value.reason and str(path) not in caught.value.reason  # the owner stays unnamed
    assert query_rows(fresh_dsn, "SELECT source, allowed_groups FROM rag_documents") == [(str(path), ["hr"])]
    assert query_rows(fresh_dsn, "SELECT node_id, text, allowed_groups, xmin::text FROM rag_nodes ORDER BY 1") == before

    # the owner of an id still replaces its own nodes
    store.add([_node("memo", "First draft.", source="mem://memo", allowed_groups=["finance"])])
    store.add([_node("memo", "Second draft.", source="mem://memo", allowed_groups=["finance"])])
    assert _visible(store, Principal("fay", ["finance"])) == ["Second draft."]
    assert_consistent(fresh_dsn)
