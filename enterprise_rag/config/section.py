"""The base of every settings section: unknown keys are errors, so a typo in YAML fails at load."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A section of :class:`~enterprise_rag.config.RagSettings`."""

    model_config = ConfigDict(extra="forbid")
