"""Our store behind LlamaIndex's vector store interface.

A stock ``VectorStoreIndex`` (and its retriever) can run on it. Writes take the
ACL from each node's metadata (``allowed_groups`` / ``allowed_users``) and
refuse nodes without one; queries run only for the principal the store was
scoped to (:meth:`PgRagVectorStore.for_principal`), with the ACL in the SQL.
Nodes added this way are flat (each one a searchable leaf).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from pydantic import PrivateAttr

from enterprise_rag.config import RetrievalSettings
from enterprise_rag.errors import IngestError, PermissionDeniedError
from enterprise_rag.principal import Principal
from enterprise_rag.schema.documents import Chunk, DocumentRecord, acl_names
from enterprise_rag.store import Database
from enterprise_rag.store.search import SearchParams, search
from enterprise_rag.store.writer import PreparedDocument, delete_documents, write_documents

_MODES = {VectorStoreQueryMode.DEFAULT: "dense", VectorStoreQueryMode.HYBRID: "hybrid",
          VectorStoreQueryMode.TEXT_SEARCH: "text"}  # fmt: skip


class PgRagVectorStore(BasePydanticVectorStore):
    """LlamaIndex vector store over ``rag_documents`` / ``rag_nodes``.

    Queries search with ``settings`` (fusion weights, superseded handling, HNSW and BM25
    parameters; the defaults when not given) and return ``similarity_top_k`` hits.
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    text_search_config: str = "english"
    _db: Database = PrivateAttr()
    _principal: Principal | None = PrivateAttr(default=None)
    _settings: RetrievalSettings = PrivateAttr()

    def __init__(
        self,
        db: Database,
        principal: Principal | None = None,
        text_search_config: str = "english",
        settings: RetrievalSettings | None = None,
    ) -> None:
        super().__init__(stores_text=True, text_search_config=text_search_config)
        self._db = db
        self._principal = principal
        self._settings = settings or RetrievalSettings()

    @classmethod
    def class_name(cls) -> str:
        return "PgRagVectorStore"

    @property
    def client(self) -> Database:
        return self._db

    def for_principal(self, principal: Principal) -> PgRagVectorStore:
        """The same store, scoped to one principal for queries."""
        return PgRagVectorStore(self._db, principal, self.text_search_config, self._settings)

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        by_doc: dict[str, list[BaseNode]] = defaultdict(list)
        for node in nodes:
            by_doc[node.ref_doc_id or node.node_id].append(node)
        prepared = [self._prepare(doc_id, group) for doc_id, group in by_doc.items()]
        with self._db.connection() as conn:
            write_documents(conn, prepared)
        return [n.node_id for n in nodes]

    def _prepare(self, document_id: str, nodes: list[BaseNode]) -> PreparedDocument:
        meta = nodes[0].metadata
        source = str(meta.get("source") or meta.get("file_path") or document_id)
        groups = acl_names(meta.get("allowed_groups"), "allowed_groups", source)
        users = acl_names(meta.get("allowed_users"), "allowed_users", source)
        if not groups and not users:
            raise IngestError(source, "node metadata carries no allowed_groups/allowed_users; refused (fail closed)")
        record = DocumentRecord(
            document_id=document_id, source=source, title=str(meta.get("title") or ""), version=None,
            status=str(meta.get("status") or "current"), effective_date=None,
            content_hash=hashlib.sha256("".join(n.get_content() for n in nodes).encode()).hexdigest(),
            allowed_groups=groups, allowed_users=users,
            metadata={k: v for k, v in meta.items() if k not in ("allowed_groups", "allowed_users")},
        )  # fmt: skip
        prepared = PreparedDocument(record=record, chunks=[])
        for position, node in enumerate(nodes):
            if node.embedding is None:
                raise IngestError(source, f"node {node.node_id} has no embedding")
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            digest = hashlib.sha256(text.encode()).hexdigest()
            prepared.chunks.append(
                Chunk(chunk_id=node.node_id, level=0, position=position, text=text, breadcrumb="", is_leaf=True)
            )
            prepared.leaf_hashes[node.node_id] = digest
            prepared.embeddings[digest] = node.embedding  # type: ignore[assignment]
        return prepared

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        with self._db.connection() as conn:
            delete_documents(conn, [ref_doc_id])

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        if self._principal is None:
            raise PermissionDeniedError("this vector store is not scoped to a user: use store.for_principal(...)")
        mode = _MODES.get(query.mode)
        if mode is None:
            raise ValueError(f"unsupported query mode {query.mode}")
        if query.filters is not None:
            raise ValueError("metadata filters are not supported; permissions come from the principal")
        if query.query_embedding is None and mode != "text":
            # LlamaIndex embeds nothing for an empty question: nothing to rank by similarity.
            if mode == "dense":
                return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
            mode = "text"
        params = SearchParams.from_settings(self._settings, self.text_search_config, candidates=query.similarity_top_k)
        with self._db.connection_for(self._principal) as conn:
            hits = search(conn, self._principal, query.query_str or "", query.query_embedding, params, mode)  # type: ignore[arg-type]
        nodes = [TextNode(id_=h.node_id, text=h.text, metadata=h.metadata) for h in hits]
        return VectorStoreQueryResult(
            nodes=nodes,  # type: ignore[arg-type]
            similarities=[h.score for h in hits],
            ids=[h.node_id for h in hits],
        )
