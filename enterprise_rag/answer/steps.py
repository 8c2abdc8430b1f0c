"""A workflow step's two records: its start and end on the run's event stream, and its row in the trace."""

from __future__ import annotations

import time
from typing import Any

from workflows import Context

from enterprise_rag.answer.events import StepFinished, StepStarted
from enterprise_rag.answer.state import RunState


def begin_step(ctx: Context[RunState], name: str) -> float:
    """Announce a step on the run's event stream; returns its start time."""
    ctx.write_event_to_stream(StepStarted(name=name))
    return time.perf_counter()


def record_step(ctx: Context[RunState], s: RunState, name: str, t0: float, **data: Any) -> None:
    """Write a step into the run's trace, then onto its event stream."""
    seconds = time.perf_counter() - t0
    s.run.recorder.step(name, data, seconds * 1000)
    ctx.write_event_to_stream(StepFinished(name=name, data=data, seconds=seconds))
