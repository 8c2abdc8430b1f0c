"""Find the files to ingest under the given paths, reporting what cannot be ingested."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Found:
    """A file to ingest, or one refused before reading (``reason`` set).

    ``root`` is the folder the file was found under: the walked folder, or an explicit file's own folder.
    """

    path: Path
    reason: str | None = None
    root: Path | None = None


def discover(paths: Iterable[str | Path], suffixes: Iterable[str]) -> Iterator[Found]:
    """Yield files under ``paths`` in a stable order, each at most once.

    Folders are walked without following symlinks (no loops); files inside
    hidden folders (``.git``) are not walked. A symlinked file inside a folder
    is followed only when it stays inside that folder: a link to ``/etc/...``
    or to a sibling project is refused with a reason, so ingesting a folder
    never reads files outside it. Unsupported and missing files are yielded
    with a reason rather than skipped silently.

    Streams with memory bounded by the largest single folder, not by the tree:
    only folder roots, explicitly given files and symlink targets are
    remembered for de-duplication, never every file seen (a tree walked
    without following links cannot reach a regular file twice).
    """
    allowed = {s.lower() for s in suffixes}
    walked: list[Path] = []  # resolved folder roots already walked
    remembered: set[Path] = set()  # resolved explicit files and symlink targets already yielded
    for given in paths:
        root = Path(given).expanduser()
        if not root.exists():
            yield Found(root, "no such file or folder")
            continue
        if not root.is_dir():
            yield from _check(root, allowed, None, walked, remembered)
            continue
        top = root.resolve()
        if _inside(top, walked):
            continue  # every file under it came from an earlier folder
        for folder, dirs, files in os.walk(root, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                yield from _check(Path(folder) / name, allowed, top, walked, remembered)
        walked.append(top)


def _inside(path: Path, folders: list[Path]) -> bool:
    return any(path == f or f in path.parents for f in folders)


def _walkable(path: Path, top: Path) -> bool:
    """Whether a walk of ``top`` reaches ``path`` itself (it skips hidden folders)."""
    if top not in path.parents:
        return False
    return not any(part.startswith(".") for part in path.relative_to(top).parts[:-1])


def _check(
    path: Path, allowed: set[str], top: Path | None, walked: list[Path], remembered: set[Path]
) -> Iterator[Found]:
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # broken symlink, loop
        yield Found(path, f"cannot resolve path: {exc}")
        return
    if _inside(resolved, walked) or resolved in remembered:
        return  # already yielded
    if top is None or path.is_symlink():
        if top is not None and top not in resolved.parents:
            yield Found(path, f"symlink to {resolved} points outside {top}: not followed")
            return
        if top is not None and _walkable(resolved, top):
            return  # the walk reaches the target itself
        remembered.add(resolved)
    if not resolved.is_file():
        yield Found(path, "not a regular file")
    elif resolved.suffix.lower() not in allowed:
        kinds = ", ".join(sorted(allowed))
        yield Found(path, f"unsupported file type {resolved.suffix or '(none)'!r} (supported: {kinds})")
    else:
        yield Found(resolved, root=top or resolved.parent)
