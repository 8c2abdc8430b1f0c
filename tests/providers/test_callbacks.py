"""The callback trace maps of the long-lived models stay bounded (enterprise_rag.providers.callbacks).

The stock LlamaIndex ``CallbackManager`` of the embedding model kept one entry per
``retrieve`` for the life of the process (the soak's RSS growth). These tests drive the
real retrieve / query paths and check the maps do not grow with the number of calls,
and that handlers still get every event and the trace map of their own traces.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.callbacks import CallbackManager
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.callbacks.schema import CBEventType
from llama_index.core.settings import Settings

from enterprise_rag import EnterpriseRAG
from enterprise_rag.config import load_settings
from enterprise_rag.providers.callbacks import TraceScopedCallbackManager, scope_trace_map
from enterprise_rag.testing import load, tenants

TEAMS = 4


class RecordingHandler(BaseCallbackHandler):
    """Records event starts and the trace maps handed over at the end of each trace."""

    def __init__(self) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])
        self.started: list[str] = []
        self.trace_maps: list[dict[str, list[str]]] = []

    def on_event_start(self, event_type: CBEventType, payload: Any = None, event_id: str = "",
                       parent_id: str = "", **kwargs: Any) -> str:  # fmt: skip
        self.started.append(event_id)
        return event_id

    def on_event_end(self, event_type: CBEventType, payload: Any = None, event_id: str = "", **kwargs: Any) -> None:
        pass

    def start_trace(self, trace_id: str | None = None) -> None:
        pass

    def end_trace(self, trace_id: str | None = None, trace_map: dict[str, list[str]] | None = None) -> None:
        self.trace_maps.append({k: list(v) for k, v in (trace_map or {}).items()})


def _entries(component: Any) -> int:
    return sum(len(children) for children in component.callback_manager.trace_map.values())


@pytest.fixture
def tenant_rag(fresh_dsn: str, tmp_path: Path, embed_model: Any) -> Iterator[EnterpriseRAG]:
    generator, grader = tenants.scripted_llms()
    settings = load_settings(None, database={"dsn": fresh_dsn})
    with EnterpriseRAG(data_dir=tmp_path / "data", settings=settings, embed_model=embed_model,
                       generator=generator, grader=grader) as rag:  # fmt: skip
        assert not rag.ingest(tenants.write_corpus(tmp_path / "docs", TEAMS)).failed
        yield rag


def _models(rag: EnterpriseRAG) -> dict[str, Any]:
    return {"embed_model": rag.providers.embed_model, "generator": rag.providers.generator,
            "grader": rag.providers.grader}  # fmt: skip


def test_trace_maps_do_not_grow_with_retrieve_and_query_calls(tenant_rag: EnterpriseRAG) -> None:
    for op in ("retrieve", "query"):
        assert all(r.ok for r in load.run_threads(tenant_rag, TEAMS, 1, op))
    before = {name: _entries(model) for name, model in _models(tenant_rag).items()}
    for op in ("retrieve", "query"):
        assert all(r.ok for r in load.run_threads(tenant_rag, TEAMS, 5, op))
        assert all(r.ok for r in load.run_asyncio(tenant_rag, TEAMS, 2, op))
    after = {name: _entries(model) for name, model in _models(tenant_rag).items()}
    # An LLM call outside any trace starts one on its own manager, which resets that map:
    # what is left is the calls that overlapped the last reset, at most one per concurrent
    # caller (the calls of one query are sequential), whatever the number of calls.
    assert all(n <= TEAMS for n in after.values()), f"trace maps grew over {TEAMS * 14} calls: {before} -> {after}"


def test_a_plain_manager_would_have_grown_on_the_same_calls(tenant_rag: EnterpriseRAG) -> None:
    """Why the scoped manager exists: the stock one keeps an entry per embedding call."""
    embed_model = tenant_rag.providers.embed_model
    scoped = embed_model.callback_manager
    embed_model.callback_manager = CallbackManager([])
    try:
        assert all(r.ok for r in load.run_threads(tenant_rag, TEAMS, 3, "retrieve"))
        assert _entries(embed_model) >= TEAMS * 3
    finally:
        embed_model.callback_manager = scoped


def test_handlers_still_get_every_event_and_the_map_of_their_own_traces() -> None:
    handler = RecordingHandler()
    manager = TraceScopedCallbackManager([handler])
    other = CallbackManager([])
    with manager.as_trace("own"):
        outer = manager.on_event_start(CBEventType.QUERY)
        inner = manager.on_event_start(CBEventType.EMBEDDING)
        manager.on_event_end(CBEventType.EMBEDDING, event_id=inner)
        manager.on_event_end(CBEventType.QUERY, event_id=outer)
    assert handler.trace_maps == [{"root": [outer], outer: [inner]}]

    with other.as_trace("someone else's"):  # e.g. a retriever's own trace around our embedding call
        for _ in range(50):
            manager.on_event_end(CBEventType.EMBEDDING, event_id=manager.on_event_start(CBEventType.EMBEDDING))
    for _ in range(50):  # outside any trace
        manager.on_event_end(CBEventType.EMBEDDING, event_id=manager.on_event_start(CBEventType.EMBEDDING))
    assert len(handler.started) == 102
    assert manager.trace_map == {"root": [outer], outer: [inner]}  # only the last own trace, until the next


def test_scope_trace_map_replaces_only_a_private_plain_manager() -> None:
    handler = RecordingHandler()
    component = type("Component", (), {})()
    component.callback_manager = CallbackManager([handler])
    scope_trace_map(component)
    assert isinstance(component.callback_manager, TraceScopedCallbackManager)
    assert component.callback_manager.handlers == [handler]

    class AppManager(CallbackManager):
        pass

    custom = AppManager([])
    component.callback_manager = custom
    assert scope_trace_map(component).callback_manager is custom

    previous = Settings._callback_manager
    Settings.callback_manager = shared = CallbackManager([])
    try:
        component.callback_manager = shared
        assert scope_trace_map(component).callback_manager is shared
    finally:
        Settings._callback_manager = previous
    assert scope_trace_map(None) is None
