"""What an ingest run did, per document, with timings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from enterprise_rag import display

Progress = Callable[[str, str], None]  # (source, outcome) after each document


@dataclass(frozen=True)
class FailedFile:
    path: str
    reason: str


@dataclass
class IngestReport:
    """Outcome of :meth:`EnterpriseRAG.ingest`: sources added / updated / unchanged / failed."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[FailedFile] = field(default_factory=list)
    nodes_written: int = 0
    leaves_embedded: int = 0
    embeddings_reused: int = 0
    seconds: float = 0.0
    seconds_parse: float = 0.0
    seconds_embed: float = 0.0
    seconds_write: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _repr_html_(self) -> str:
        return display.ingest_report_html(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        lines = [self.summary()] + [f"failed: {f.path}: {f.reason}" for f in self.failed]
        printer.text("\n".join(lines))

    def summary(self) -> str:
        return (
            f"{len(self.added)} added, {len(self.updated)} updated, {len(self.unchanged)} unchanged, "
            f"{len(self.failed)} failed; {self.nodes_written} nodes written in {self.seconds:.1f} s"
        )
