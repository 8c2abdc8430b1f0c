"""The public entry point: :class:`EnterpriseRAG`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM

from enterprise_rag.answer.checks.addressee import AddresseeCheck
from enterprise_rag.answer.checks.grading import Grader
from enterprise_rag.answer.runner import AnswerRunner, run_sync
from enterprise_rag.answer.streaming import StreamEvent, iterate_sync
from enterprise_rag.answer.workflow import AnswerWorkflow
from enterprise_rag.config import RagSettings, load_settings
from enterprise_rag.errors import IngestError, PermissionDeniedError
from enterprise_rag.ingest.pipeline import Ingestor
from enterprise_rag.principal import Principal, require_principal
from enterprise_rag.providers import Providers
from enterprise_rag.query_engine import PermissionScopedQueryEngine
from enterprise_rag.retrieval.retriever import PermissionScopedRetriever, RetrievalOptions, Retriever
from enterprise_rag.schema.documents import acl_names, document_id_for
from enterprise_rag.schema.ingest import IngestReport, Progress
from enterprise_rag.schema.result import QueryResult, RetrievedNodes, Trace
from enterprise_rag.schema.sources import History, WebResult
from enterprise_rag.store import Database
from enterprise_rag.store.documents import document_ids_matching
from enterprise_rag.store.status import store_status
from enterprise_rag.store.traces import TraceStore
from enterprise_rag.store.writer import delete_documents, set_access

if TYPE_CHECKING:
    import psycopg

    from enterprise_rag.llm.caller import LLMCaller

logger = logging.getLogger(__name__)


class EnterpriseRAG:
    """Permission-scoped, cited, self-checking RAG over your documents.

    >>> from enterprise_rag import EnterpriseRAG, Principal
    >>> rag = EnterpriseRAG(data_dir="/srv/rag")                          # embedded defaults
    >>> rag.ingest("handbook/", allowed_groups=["all-staff"])             # doctest: +SKIP
    >>> res = rag.query("How long is the refund window?", user=Principal("dana", ["all-staff"]))  # doctest: +SKIP
    >>> res.answer, [c.source for c in res.citations]                     # doctest: +SKIP

    Models and clients can be injected (tests use the fakes in
    :mod:`enterprise_rag.testing`); anything not injected is built from the
    configuration on first use. The constructor connects to nothing.
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        settings: RagSettings | None = None,
        embed_model: BaseEmbedding | None = None,
        generator: LLM | None = None,
        grader: LLM | None = None,
        stop_server_on_close: bool = False,
    ) -> None:
        self.settings = settings if settings is not None else load_settings()
        self.stop_server_on_close = stop_server_on_close
        if data_dir is not None:
            self.settings = self.settings.model_copy(update={"data_dir": Path(data_dir)})
        self.data_dir = self.settings.resolved_data_dir()
        self.providers = Providers(
            self.settings, self.data_dir, embed_model=embed_model, generator=generator, grader=grader
        )
        self.db = Database(self.settings.database, self.data_dir, self.settings.embedding.dimensions)
        self._built_retriever: Retriever | None = None  # built on the first retrieval
        self._answers: AnswerRunner | None = None  # the answer workflow, built on the first query
        self._built_lock = threading.Lock()

    @classmethod
    def from_config(cls, path: str | Path | None, data_dir: str | Path | None = None, **injected: Any) -> EnterpriseRAG:
        """Build from a YAML config file (``None`` = defaults), with environment overrides.

        >>> rag = EnterpriseRAG.from_config("config/production.yaml")   # doctest: +SKIP
        """
        return cls(data_dir=data_dir, settings=load_settings(path), **injected)

    def ingest(
        self,
        paths: str | Path | Sequence[str | Path],
        allowed_groups: str | Sequence[str] | None = None,
        allowed_users: str | Sequence[str] | None = None,
        metadata: dict[str, Any] | None = None,
        progress: Progress | None = None,
    ) -> IngestReport:
        """Ingest files or folders (pdf, docx, pptx, xlsx, csv, md, html, txt) with their ACL.

        The ACL comes from the arguments (lists of names, or one name as a string)
        or, when both are None, from each document's front-matter; a document with
        neither is refused. Unchanged documents are skipped; changed ones replace
        their nodes atomically; a file whose ``document_id`` belongs to another
        source is refused.
        A bad file fails alone, with its path and reason in ``report.failed``.
        ``progress(source, outcome)`` is called after each document.

        >>> report = rag.ingest("handbook/", allowed_groups=["all-staff"])   # doctest: +SKIP
        >>> report.summary()                                               # doctest: +SKIP
        '12 added, 0 updated, 0 unchanged, 0 failed; 230 nodes written in 9.8 s'
        >>> rag.ingest(["hr/salaries.md"])            # ACL from front-matter  # doctest: +SKIP
        """
        ingestor = Ingestor(self.db, self.providers.embed_model, self.settings.ingest)
        items = [paths] if isinstance(paths, (str, Path)) else list(paths)
        return ingestor.ingest(items, allowed_groups, allowed_users, metadata, progress)

    def sync(
        self,
        root: str | Path,
        allowed_groups: str | Sequence[str] | None = None,
        allowed_users: str | Sequence[str] | None = None,
        metadata: dict[str, Any] | None = None,
        progress: Progress | None = None,
        dry_run: bool = False,
    ) -> IngestReport:
        """Make the store match the folder ``root``: new files added, changed ones replaced, and the
        documents whose files are gone from under it deleted (documents of other folders are untouched).

        A rename is a delete and an add whose unchanged chunks keep their stored vectors (adds run before
        deletes). A second run with nothing changed does nothing. ``dry_run`` reads and compares only:
        the report is the plan. A folder that does not exist (an unmounted share) is an
        :class:`IngestError`, never "every file is gone".

        >>> rag.sync("handbook/", allowed_groups=["all-staff"], dry_run=True).summary()   # doctest: +SKIP
        'plan (dry run, nothing written): 1 to add, 0 to update, 2 to delete, 11 unchanged, 0 failed'
        """
        ingestor = Ingestor(self.db, self.providers.embed_model, self.settings.ingest)
        return ingestor.sync(root, allowed_groups, allowed_users, metadata, progress, dry_run)

    def delete(self, document_id_or_path: str | Path) -> bool:
        """Delete a document (by id, or by the path it was ingested from) and all its nodes.

        Returns False when nothing matched.

        >>> rag.delete("handbook/old-policy.md")   # doctest: +SKIP
        True
        """
        with self.db.connection() as conn:
            return delete_documents(conn, _stored_ids(conn, str(document_id_or_path))) > 0

    def set_access(
        self,
        document_id_or_path: str | Path,
        allowed_groups: str | Sequence[str] | None = None,
        allowed_users: str | Sequence[str] | None = None,
    ) -> bool:
        """Change who may read a stored document (by id, or by the path it was ingested from): the document and
        every node of it, in one transaction, logged with both ACLs. The only way besides ingesting its source
        again; other writes that would change a document's readers are refused. A new ACL naming nobody is
        refused (fail closed). Returns False when nothing matched.

        >>> rag.set_access("hr/salaries.md", allowed_groups=["hr", "finance"])   # doctest: +SKIP
        True
        """
        key = str(document_id_or_path)
        groups = acl_names(allowed_groups, "allowed_groups", key)
        users = acl_names(allowed_users, "allowed_users", key)
        if not groups and not users:
            raise IngestError(key, "an ACL naming no group and no user would leave the document to nobody; refused")
        with self.db.connection() as conn:
            changed = [(doc, set_access(conn, doc, groups, users)) for doc in _stored_ids(conn, key)]
        for doc, old in changed:
            logger.info("access of document %s changed: groups %s -> %s, users %s -> %s", doc,
                        old and old[0], groups, old and old[1], users)  # fmt: skip
        return any(old is not None for _, old in changed)

    def as_retriever(
        self,
        user: Principal,
        top_k: int | None = None,
        history: History | None = None,
        options: RetrievalOptions | None = None,
    ) -> PermissionScopedRetriever:
        """A LlamaIndex ``BaseRetriever`` scoped to ``user`` (sync and async), for your own query engines.

        >>> retriever = rag.as_retriever(user=Principal("dana", ["all-staff"]), top_k=5)  # doctest: +SKIP
        >>> nodes = retriever.retrieve("refund window")       # or: await retriever.aretrieve(...)  # doctest: +SKIP
        """
        return PermissionScopedRetriever(self._retriever(), user, top_k=top_k, history=history, options=options)

    def as_query_engine(self, user: Principal, history: History | None = None) -> PermissionScopedQueryEngine:
        """A LlamaIndex ``BaseQueryEngine`` answering for ``user`` with the workflow of :meth:`query`.

        >>> engine = rag.as_query_engine(user=Principal("dana", ["all-staff"]))  # doctest: +SKIP
        >>> response = engine.query("How long is the refund window?")          # doctest: +SKIP
        """
        return PermissionScopedQueryEngine(self, require_principal(user), history=history)

    def retrieve(
        self,
        question: str,
        user: Principal,
        top_k: int | None = None,
        history: History | None = None,
    ) -> RetrievedNodes:
        """Passages ``user`` may read that best answer ``question``, parents merged, best first.

        A plain ``list[NodeWithScore]`` that a notebook shows as a table.

        >>> for hit in rag.retrieve("refund window", user=Principal("dana", ["all-staff"]), top_k=3):  # doctest: +SKIP
        ...     print(hit.score, hit.node.metadata["source"], hit.node.metadata.get("page"))
        """
        return RetrievedNodes(self.as_retriever(user, top_k=top_k, history=history).retrieve(question))

    async def aquery(
        self, question: str, user: Principal, history: History | None = None, trace_id: str | None = None
    ) -> QueryResult:
        """Answer with citations and checks; the async form of :meth:`query`.

        >>> res = await rag.aquery("How long is the refund window?", user=dana)   # doctest: +SKIP
        """
        principal = require_principal(user)
        return await self._answer_runner().run(question, principal, history, trace_id)

    def query(
        self, question: str, user: Principal, history: History | None = None, trace_id: str | None = None
    ) -> QueryResult:
        """Answer ``question`` for ``user`` from the passages they may read, cited and checked.

        Runs the corrective workflow (grade, rewrite, guarded web fallback,
        generate, citation / support / usefulness checks). Passing the
        ``trace_id`` of a run that was interrupted resumes it without repeating
        the LLM calls it had finished. ``history`` (``[{"role": "user", "content": ...}, ...]``)
        makes ``question`` a follow-up, rewritten standalone before retrieval.

        >>> res = rag.query("How long is the refund window?", user=Principal("dana", ["all-staff"]))  # doctest: +SKIP
        >>> res.answer, res.citations[0].source, res.evaluation["confidence"], res.trace_id  # doctest: +SKIP
        >>> res.to_dict()                     # the JSON payload                            # doctest: +SKIP
        """
        return run_sync(self.aquery(question, user, history, trace_id))

    def stream_query(self, question: str, user: Principal, history: History | None = None) -> Iterator[StreamEvent]:
        """Stream a query: ``started`` and ``step`` events as each workflow step begins and finishes (with
        its ``seconds``), ``draft`` pieces as the generator writes, then the checked answer sentence by
        sentence (``answer``), then the full ``result``.

        A draft is unchecked (a check may still cut a sentence or send it back for revision, and a
        revision starts a new draft); only the ``answer`` events passed the citation and support checks.

        >>> for event in rag.stream_query("How long is the refund window?", user=dana):  # doctest: +SKIP
        ...     print(event.kind, event.name or event.text, f"{event.seconds:.1f} s" if event.kind == "step" else "")
        """
        principal = require_principal(user)
        return iterate_sync(self._answer_runner().stream(question, principal, history))

    def _retriever(self) -> Retriever:
        """The one retrieval pipeline of this store, built on first use (it loads the embedding model)."""
        with self._built_lock:
            if self._built_retriever is None:
                providers = self.providers
                self._built_retriever = Retriever(
                    db=self.db, embed_model=providers.embed_model, settings=self.settings.retrieval,
                    text_search_config=self.settings.database.text_search_config, llm=lambda: providers.grader,
                    reranker=providers.reranker,
                )  # fmt: skip
            return self._built_retriever

    def _answer_runner(self) -> AnswerRunner:
        """The one answer workflow (and its runner) that serves every query, built on first use."""
        retriever = self._retriever()
        with self._built_lock:
            if self._answers is None:
                self._answers = self._build_answer_runner(retriever)
            return self._answers

    def _build_answer_runner(self, retriever: Retriever) -> AnswerRunner:
        cfg = self.settings.workflow
        providers = self.providers
        embed_model = providers.embed_model

        def grader(caller: LLMCaller) -> Grader:
            return Grader(self.db, caller, thresholds=cfg.grade_thresholds_for(caller.model_id("grader")),
                          floor=cfg.grade_floor_for(embed_model.model_name))  # fmt: skip

        def screen(caller: LLMCaller) -> AddresseeCheck:
            return AddresseeCheck(caller, threshold=cfg.addressee_threshold_for(caller.model_id("grader")), db=self.db)

        # The web source is built when a query first needs it, not with the workflow.
        def egress_allows(principal: Principal) -> bool:
            return bool(providers.egress_policy.allows(principal))

        def web_search(query: str) -> list[WebResult]:
            source = providers.web_search
            return [] if source is None else source.search(query)

        workflow = AnswerWorkflow(
            retriever=retriever, grader=grader, screen=screen, embed_model=embed_model, egress_allows=egress_allows,
            web_search=web_search, settings=cfg,
        )  # fmt: skip
        llms = {"generator": providers.generator, "grader": providers.grader}
        return AnswerRunner(workflow, TraceStore(self.db), llms, cfg)

    def resume(self, trace_id: str, user: Principal) -> QueryResult:
        """Resume an interrupted query from its trace (same user only), replaying the LLM calls it had made.

        >>> res = rag.resume(trace_id, user=dana)   # doctest: +SKIP
        """
        trace = self.trace(trace_id, user)
        if trace is None:
            raise PermissionDeniedError(f"no trace {trace_id} for this user")
        return self.query(trace["question"], user, history=trace["history"], trace_id=trace_id)

    def trace(self, trace_id: str, user: Principal) -> Trace | None:
        """The stored trace of a query (steps, grades, decisions, LLM calls), only for the user who asked.

        A plain dict that a notebook shows as tables.

        >>> trace = rag.trace(res.trace_id, user=dana)              # doctest: +SKIP
        >>> [(s["step"], round(s["ms"])) for s in trace["steps"]]   # doctest: +SKIP
        """
        trace = TraceStore(self.db).get(trace_id, require_principal(user))
        return None if trace is None else Trace(trace)

    def status(self) -> dict[str, Any]:
        """Store location, server and pgvector versions, counts, configured models.

        >>> rag.status()["documents"], rag.status()["pgvector_version"]   # doctest: +SKIP
        """
        with self.db.connection() as conn:
            stored = store_status(conn)
        return {
            "store": self.db.location,
            "embedded": self.db.embedded,
            "postgres_version": stored.postgres_version,
            "pgvector_version": stored.pgvector_version,
            "documents": stored.documents,
            "nodes": stored.nodes,
            "leaf_nodes": stored.leaves,
            "migrations": stored.migrations,
            "models": self.providers.describe(),
        }

    def close(self) -> None:
        """Close the connection pool. The embedded server keeps running for the next process, unless
        ``stop_server_on_close`` was given: then a server this instance started is stopped when no
        other client is connected to it."""
        self.db.close(stop_server=self.stop_server_on_close)

    def __enter__(self) -> EnterpriseRAG:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stored_ids(conn: psycopg.Connection, key: str) -> list[str]:
    """The stored documents ``key`` names: a document id, or the path a document was ingested from."""
    source = str(Path(key).expanduser().resolve())
    return document_ids_matching(conn, [key, document_id_for(source)], source)
