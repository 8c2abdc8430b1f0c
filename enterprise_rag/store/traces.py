"""Traces: what one query did, step by step, stored under its trace id.

LLM calls are stored with their full prompt and response keyed by a hash of
the request, so re-running a trace (after a crash or a kill) answers those
calls from the store: the run resumes where it stopped without re-spending
LLM calls, and reaches the same decisions.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from enterprise_rag.errors import PermissionDeniedError
from enterprise_rag.principal import Principal, storable_name
from enterprise_rag.store import Database

logger = logging.getLogger(__name__)


def new_trace_id() -> str:
    return uuid.uuid4().hex


def storable_text(text: str) -> str:
    """``text`` with what PostgreSQL text and jsonb cannot hold (NUL bytes, unpaired surrogates) replaced."""
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def _json(data: Any) -> str:
    return json.dumps(data, default=str)


class TraceStore:
    """Reads and writes traces. Users read only their own traces."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def start(self, trace_id: str, principal: Principal, question: str, history: list[dict[str, str]]) -> bool:
        """Open a trace; returns False when it already exists (a resume) for this same user.

        A user id PostgreSQL cannot store cannot own a trace (a lossy copy could match another
        user), so it is refused; group names it cannot store match nothing and are left out.
        """
        if not storable_name(principal.user_id):
            raise PermissionDeniedError("this user id cannot own a trace: it holds a NUL byte or an unpaired surrogate")
        groups = [g for g in principal.groups if storable_name(g)]
        with self._db.connection() as conn:
            row = conn.execute("SELECT user_id FROM rag_traces WHERE trace_id = %s", (trace_id,)).fetchone()
            if row is not None:
                if row[0] != principal.user_id:
                    raise PermissionDeniedError("this trace belongs to another user")
                conn.execute("UPDATE rag_traces SET status = 'running', error = NULL WHERE trace_id = %s", (trace_id,))
                return False
            conn.execute(
                "INSERT INTO rag_traces (trace_id, user_id, groups, question, history, document_ids)"
                " VALUES (%s, %s, %s, %s, %s, '{}')",
                (trace_id, principal.user_id, groups, storable_text(question), _json(history)),
            )
            return True

    def record_documents(self, trace_id: str, document_ids: Sequence[str]) -> None:
        """Add to the documents the trace's run retrieved from (see :meth:`get`)."""
        with self._db.connection() as conn:
            conn.execute(
                "UPDATE rag_traces SET document_ids = ARRAY(SELECT DISTINCT d FROM"
                " unnest(coalesce(document_ids, '{}') || %s::text[]) AS d ORDER BY d) WHERE trace_id = %s",
                (list(document_ids), trace_id),
            )

    def record_step(self, trace_id: str, seq: int, step: str, data: dict[str, Any], ms: float) -> None:
        with self._db.connection() as conn:
            conn.execute(
                "INSERT INTO rag_trace_steps (trace_id, seq, step, data, ms) VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT (trace_id, seq) DO UPDATE SET step = EXCLUDED.step, data = EXCLUDED.data,"
                " ms = EXCLUDED.ms",
                (trace_id, seq, step, _json(data), ms),
            )

    def record_call(self, trace_id: str, call: dict[str, Any]) -> None:
        with self._db.connection() as conn:
            conn.execute(
                "INSERT INTO rag_llm_calls (trace_id, call_key, seq, name, role, model, messages, response,"
                " prompt_tokens, cached_tokens, completion_tokens, ms) VALUES (%(trace_id)s, %(key)s, %(seq)s,"
                " %(name)s, %(role)s, %(model)s, %(messages)s, %(response)s, %(prompt_tokens)s, %(cached_tokens)s,"
                " %(completion_tokens)s, %(ms)s) ON CONFLICT (trace_id, call_key) DO NOTHING",
                {"cached_tokens": 0, **call, "trace_id": trace_id, "messages": _json(call["messages"])},
            )

    def recorded_calls(self, trace_id: str) -> dict[str, dict[str, Any]]:
        with self._db.connection() as conn:
            rows = conn.execute(
                "SELECT call_key, response, prompt_tokens, completion_tokens, seq FROM rag_llm_calls"
                " WHERE trace_id = %s",
                (trace_id,),
            ).fetchall()
        return {r[0]: {"response": r[1], "prompt_tokens": r[2], "completion_tokens": r[3], "seq": r[4]} for r in rows}

    def finish(self, trace_id: str, result: dict[str, Any] | None, error: str | None = None) -> None:
        with self._db.connection() as conn:
            conn.execute(
                "UPDATE rag_traces SET status = %s, result = %s, error = %s, finished_at = now() WHERE trace_id = %s",
                ("failed" if error else "done", _json(result) if result is not None else None, error, trace_id),
            )

    def get(self, trace_id: str, principal: Principal) -> dict[str, Any] | None:
        """The whole trace, or None if it does not exist or belongs to another user.

        Permissions are checked again as the trace is read: when its run retrieved from a document
        the reader may not read now (a group was taken away, the document deleted or re-shared),
        or from documents not recorded, everything the retrieved text reached is redacted
        (see :func:`redact`).
        """
        if not storable_name(principal.user_id):
            return None  # such an id owns no trace (see start)
        with self._db.connection_for(principal) as conn:
            row = conn.execute(
                "SELECT trace_id, user_id, groups, question, history, status, result, error, created_at, finished_at,"
                " document_ids FROM rag_traces WHERE trace_id = %s AND user_id = %s",
                (trace_id, principal.user_id),
            ).fetchone()
            if row is None:
                return None
            used: list[str] | None = row[-1]
            readable = {
                r[0]
                for r in conn.execute(
                    "SELECT document_id FROM rag_documents WHERE document_id = ANY(%s)", (used or [],)
                ).fetchall()
            }
            steps = conn.execute(
                "SELECT seq, step, data, ms FROM rag_trace_steps WHERE trace_id = %s ORDER BY seq", (trace_id,)
            ).fetchall()
            calls = conn.execute(
                "SELECT seq, name, role, model, messages, response, prompt_tokens, cached_tokens, completion_tokens,"
                " ms FROM rag_llm_calls WHERE trace_id = %s ORDER BY seq",
                (trace_id,),
            ).fetchall()
        keys = ("trace_id", "user_id", "groups", "question", "history", "status", "result", "error", "created_at",
                "finished_at")  # fmt: skip
        trace = dict(zip(keys, row[:-1], strict=True))
        trace["steps"] = [{"seq": s[0], "step": s[1], "data": s[2], "ms": s[3]} for s in steps]
        call_keys = ("seq", "name", "role", "model", "messages", "response", "prompt_tokens", "cached_tokens",
                     "completion_tokens", "ms")  # fmt: skip
        trace["llm_calls"] = [dict(zip(call_keys, c, strict=True)) for c in calls]
        unreadable = None if used is None else set(used) - readable
        return trace if unreadable == set() else redact(trace, unreadable)

    def recent(self, principal: Principal, limit: int = 20) -> list[dict[str, Any]]:
        if not storable_name(principal.user_id):
            return []
        with self._db.connection_for(principal) as conn:
            rows = conn.execute(
                "SELECT trace_id, question, status, created_at FROM rag_traces WHERE user_id = %s"
                " ORDER BY created_at DESC LIMIT %s",
                (principal.user_id, limit),
            ).fetchall()
        return [{"trace_id": r[0], "question": r[1], "status": r[2], "created_at": r[3]} for r in rows]


REDACTED = "[redacted: this trace used a document you can no longer read]"


def redact(trace: dict[str, Any], unreadable: set[str] | None) -> dict[str, Any]:
    """``trace`` with everything that retrieved text reached replaced by :data:`REDACTED`.

    ``unreadable``: the documents the reader may no longer read (None: not known). Retrieved
    passages go into prompts, model replies, step data and the answer, and a reply can restate a
    passage in other words, so no finer cut is safe: every prompt, reply, step's data, the answer,
    the error (a server's message can echo its prompt) and the assistant turns of the history (earlier
    answers) go, and each citation of an unreadable (or unknown) document. The question, the user's own
    turns of the history, and step names, timings and token counts stay.
    """

    def hidden(item: dict[str, Any]) -> bool:
        return unreadable is None or str(item.get("document_id", "")) in unreadable

    out = {**trace}
    out["history"] = [t if t.get("role") == "user" else {**t, "content": REDACTED} for t in trace.get("history") or []]
    if trace.get("error"):
        out["error"] = REDACTED
    out["steps"] = [{**s, "data": {"redacted": REDACTED}} for s in trace["steps"]]
    out["llm_calls"] = [{**c, "messages": [], "response": REDACTED} for c in trace["llm_calls"]]
    result = trace.get("result")
    if isinstance(result, dict):
        out["result"] = {**result, "answer": REDACTED}
        out["result"]["citations"] = [{"redacted": REDACTED} if hidden(c) else c for c in result.get("citations", [])]
        support = result.get("evaluation", {}).get("support")
        if isinstance(support, dict) and support.get("unsupported_claims"):  # sentences of the answer
            redacted_support = {**support, "unsupported_claims": [REDACTED]}
            out["result"]["evaluation"] = {**result["evaluation"], "support": redacted_support}
    return out


class TraceRecorder:
    """The trace of one running query: numbered steps and LLM calls, replayed on resume."""

    def __init__(self, store: TraceStore | None, trace_id: str) -> None:
        self.store = store
        self.trace_id = trace_id
        self._seq = 0
        self._lock = threading.Lock()
        self._replay: dict[str, dict[str, Any]] = store.recorded_calls(trace_id) if store else {}
        # A resumed run numbers its new calls after the recorded ones, so the trace keeps their order.
        self._call_seq = max((int(c["seq"]) for c in self._replay.values()), default=0)
        self.steps: list[dict[str, Any]] = []

    def step(self, name: str, data: dict[str, Any], ms: float) -> None:
        with self._lock:
            self._seq += 1
            seq = self._seq
        self.steps.append({"seq": seq, "step": name, "data": data, "ms": round(ms, 1)})
        if self.store:
            self.store.record_step(self.trace_id, seq, name, data, ms)

    def documents(self, document_ids: set[str]) -> None:
        """Record the documents the run retrieved from (checked again whenever the trace is read)."""
        if self.store and document_ids:
            self.store.record_documents(self.trace_id, sorted(document_ids))

    def replayed(self, key: str) -> dict[str, Any] | None:
        return self._replay.get(key)

    def call(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._call_seq += 1
            record = {**record, "seq": self._call_seq}
        if self.store:
            self.store.record_call(self.trace_id, record)
