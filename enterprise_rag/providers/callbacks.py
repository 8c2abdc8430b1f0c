"""A LlamaIndex ``CallbackManager`` whose trace map holds only what a handler can still receive.

The stock manager appends every event id to its ``_trace_map`` and empties the map
only when a trace starts on that same manager; handlers receive the map when that
trace ends. The embedding model, LLMs and reranker of an :class:`EnterpriseRAG` live
as long as it does, each with its own manager, and most of their events happen inside
traces started on other managers (every ``retriever.retrieve`` opens one on the
retriever's own manager). Those events were never delivered to anyone and never
cleared: one list and two uuid strings per embedding call, kept for the life of the
process (measured: ~260 bytes per ``retrieve``, +1.8 MB/min of RSS in a 16-thread soak).

:class:`TraceScopedCallbackManager` keeps an event only while a trace it started
itself is the outermost one open in the current context, which is exactly when a
handler can still get it; everything else goes to the handlers as before and is
then forgotten.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from llama_index.core.callbacks.base import CallbackManager, global_stack_trace, global_stack_trace_ids
from llama_index.core.callbacks.schema import CBEventType
from llama_index.core.settings import Settings

# id() of the manager that started the outermost open trace in this thread / task, if one of ours did.
_trace_owner: ContextVar[int | None] = ContextVar("enterprise_rag_trace_owner", default=None)


class TraceScopedCallbackManager(CallbackManager):
    """Same events to the same handlers; the trace map keeps only events of this manager's own traces."""

    def start_trace(self, trace_id: str | None = None) -> None:
        outermost = trace_id is not None and not global_stack_trace_ids.get()
        super().start_trace(trace_id)
        if outermost:
            _trace_owner.set(id(self))

    def end_trace(self, trace_id: str | None = None, trace_map: dict[str, list[str]] | None = None) -> None:
        super().end_trace(trace_id, trace_map)
        if not global_stack_trace_ids.get():
            _trace_owner.set(None)

    def on_event_start(
        self,
        event_type: CBEventType,
        payload: dict[str, Any] | None = None,
        event_id: str | None = None,
        parent_id: str | None = None,
        **kwargs: Any,
    ) -> str:
        stack = global_stack_trace.get()
        parent = parent_id or (stack[-1] if stack else None)
        event_id = super().on_event_start(event_type, payload, event_id, parent_id, **kwargs)
        if parent is not None and _trace_owner.get() != id(self):
            siblings = self._trace_map.get(parent)
            if siblings is not None:
                if event_id in siblings:
                    siblings.remove(event_id)
                if not siblings:
                    self._trace_map.pop(parent, None)
        return event_id


def scope_trace_map(component: Any) -> Any:
    """Give ``component`` a :class:`TraceScopedCallbackManager` with the same handlers; return it.

    Only a component's private, plain ``CallbackManager`` is replaced: a manager the
    application set on purpose (a subclass, or the global ``Settings.callback_manager``,
    whose map resets at every top-level trace) is left alone.
    """
    manager = getattr(component, "callback_manager", None)
    if type(manager) is CallbackManager and manager is not Settings._callback_manager:
        scoped = TraceScopedCallbackManager([])
        scoped.set_handlers(list(manager.handlers))  # the constructor would add the global handler twice
        component.callback_manager = scoped
    return component
