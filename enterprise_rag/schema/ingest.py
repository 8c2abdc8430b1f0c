"""What an ingest run did, per document, with timings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from enterprise_rag.schema import display

Progress = Callable[[str, str], None]  # (source, outcome) after each document


@dataclass(frozen=True)
class FailedFile:
    path: str
    reason: str


@dataclass(frozen=True)
class FileWarning:
    """A document that was ingested with a loss a person should know about (a page with no text layer)."""

    path: str
    message: str


@dataclass
class IngestReport:
    """Outcome of :meth:`EnterpriseRAG.ingest`: sources added / updated / unchanged / failed.

    >>> report = rag.ingest("handbook/", allowed_groups=["all-staff"])   # doctest: +SKIP
    >>> report.summary()                                               # doctest: +SKIP
    '11 added, 0 updated, 0 unchanged, 1 failed; 214 nodes written in 9.3 s'
    >>> [(f.path, f.reason) for f in report.failed]                    # doctest: +SKIP
    [('/srv/handbook/scan.pdf', 'corrupt or unreadable PDF: ...')]
    >>> IngestReport(added=["a.md"]).summary()
    '1 added, 0 updated, 0 unchanged, 0 failed; 0 nodes written in 0.0 s'
    """

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[FailedFile] = field(default_factory=list)
    warnings: list[FileWarning] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # by a sync: documents whose files are gone
    dry_run: bool = False  # a sync's plan: the lists say what it would do, nothing was written
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
        lines += [f"warning: {w.path}: {w.message}" for w in self.warnings]
        printer.text("\n".join(lines))

    def summary(self) -> str:
        if self.dry_run:
            return (
                f"plan (dry run, nothing written): {len(self.added)} to add, {len(self.updated)} to update, "
                f"{len(self.deleted)} to delete, {len(self.unchanged)} unchanged, {len(self.failed)} failed"
            )
        deleted = f"{len(self.deleted)} deleted, " if self.deleted else ""
        return (
            f"{len(self.added)} added, {len(self.updated)} updated, {len(self.unchanged)} unchanged, {deleted}"
            f"{len(self.failed)} failed; {self.nodes_written} nodes written in {self.seconds:.1f} s"
            + (f"; {len(self.warnings)} warning(s)" if self.warnings else "")
        )
