"""Find the files to ingest under the given paths, reporting what cannot be ingested."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Found:
    """A file to ingest, or one refused before reading (``reason`` set)."""

    path: Path
    reason: str | None = None


def discover(paths: Iterable[str | Path], suffixes: Iterable[str]) -> Iterator[Found]:
    """Yield files under ``paths`` in a stable order, each at most once.

    Folders are walked without following symlinks (no loops); files inside
    hidden folders (``.git``) are not walked. Unsupported and missing files
    are yielded with a reason rather than skipped silently. Streams: a folder
    of 100,000 files is never held in memory as a whole tree.
    """
    allowed = {s.lower() for s in suffixes}
    seen: set[Path] = set()
    for given in paths:
        root = Path(given).expanduser()
        if not root.exists():
            yield Found(root, "no such file or folder")
            continue
        if root.is_dir():
            for folder, dirs, files in os.walk(root, followlinks=False):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    yield from _check(Path(folder) / name, allowed, seen)
        else:
            yield from _check(root, allowed, seen)


def _check(path: Path, allowed: set[str], seen: set[Path]) -> Iterator[Found]:
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # broken symlink, loop
        yield Found(path, f"cannot resolve path: {exc}")
        return
    if resolved in seen:
        return
    seen.add(resolved)
    if not resolved.is_file():
        yield Found(path, "not a regular file")
    elif resolved.suffix.lower() not in allowed:
        kinds = ", ".join(sorted(allowed))
        yield Found(path, f"unsupported file type {resolved.suffix or '(none)'!r} (supported: {kinds})")
    else:
        yield Found(resolved)
