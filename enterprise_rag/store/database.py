"""Connections to the store: resolves the DSN (external or embedded), migrates as the owner, then
pools connections of the package's own login role (see :mod:`enterprise_rag.store.credentials`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from pgvector.psycopg import register_vector
from psycopg_pool import ConnectionPool

from enterprise_rag.config import DatabaseSettings
from enterprise_rag.errors import StoreError
from enterprise_rag.principal import Principal
from enterprise_rag.store.credentials import AppAccess, provision
from enterprise_rag.store.embedded import embedded_running, other_clients, start_embedded, stop_embedded
from enterprise_rag.store.migrate import apply_migrations
from enterprise_rag.store.scoping import AppConnection, act_as_service, read_as

logger = logging.getLogger(__name__)


class Database:
    """A lazily opened, migrated connection pool whose connections know pgvector's types.

    Nothing connects in the constructor; the first :meth:`connection` starts the
    embedded server when no DSN is configured, applies migrations and makes the login
    role as the owner, and opens the pool as that role. Every pooled transaction acts
    for someone, signed: :meth:`connection` for the package itself, :meth:`connection_for`
    for one user.
    """

    def __init__(self, settings: DatabaseSettings, data_dir: Path, embed_dim: int) -> None:
        self._settings = settings
        self._data_dir = data_dir
        self._embed_dim = embed_dim
        self._pool: ConnectionPool[AppConnection] | None = None
        self._dsn: str | None = None
        self._access: AppAccess | None = None
        self._started_server = False  # this instance started the embedded server (it was not running)
        self._lock = threading.Lock()

    @property
    def embedded(self) -> bool:
        return self._settings.dsn is None

    @property
    def location(self) -> str:
        """Where the store is, for humans: the embedded data folder or the external host (no password)."""
        if self.embedded:
            return str(self._data_dir / "pg")
        info = psycopg.conninfo.conninfo_to_dict(self._settings.dsn.get_secret_value())  # type: ignore[union-attr]
        return f"postgresql://{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"

    def dsn(self) -> str:
        """The owner's DSN: migrations and administration (starts the embedded server if needed)."""
        if self._dsn is None:
            if self._settings.dsn is not None:
                self._dsn = self._settings.dsn.get_secret_value()
            else:
                self._started_server = not embedded_running(self._data_dir)
                self._dsn = start_embedded(self._data_dir, self._settings.embedded_shared_buffers_mb)
        return self._dsn

    def _open(self) -> ConnectionPool[AppConnection]:
        with self._lock:
            if self._pool is not None:
                return self._pool
            dsn = self.dsn()
            try:
                with psycopg.connect(dsn, connect_timeout=int(self._settings.connect_timeout_s)) as conn:
                    apply_migrations(conn, self._embed_dim, self._settings.text_search_config)
                    access = provision(conn, dsn, self._settings.app_connection_limit)
            except psycopg.OperationalError as exc:
                raise StoreError(f"cannot connect to PostgreSQL at {self.location}: {exc}") from exc

            def configure(conn: psycopg.Connection) -> None:
                # pgvector's adapters on every connection: numpy arrays go in as binary vectors and
                # vector columns come back as pgvector Vectors (bound to the type's OID, which exists
                # once the migrations above ran). The key stays in this process.
                register_vector(conn)
                conn.signing_key = access.signing_key  # type: ignore[attr-defined]

            pool = ConnectionPool(
                access.dsn,
                min_size=self._settings.pool_min_size,
                max_size=self._settings.pool_max_size,
                timeout=self._settings.connect_timeout_s,
                open=False,
                check=ConnectionPool.check_connection,
                connection_class=AppConnection,
                configure=configure,
            )
            pool.open(wait=False)
            self._access = access
            self._pool = pool
            return pool

    def app_dsn(self) -> str:
        """The DSN of the package's login role (opens the store if needed)."""
        self._open()
        assert self._access is not None
        return self._access.dsn

    def migrate(self) -> list[str]:
        """Apply pending migrations now; return the files applied."""
        with psycopg.connect(self.dsn()) as conn:
            return apply_migrations(conn, self._embed_dim, self._settings.text_search_config)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled connection in a transaction of the package's own work (writes, corpus-wide reads),
        committed on success."""
        pool = self._open()
        try:
            with pool.connection() as conn:
                act_as_service(conn)
                yield conn
        except psycopg.OperationalError as exc:
            raise StoreError(f"database error at {self.location}: {exc}") from exc

    @contextmanager
    def connection_for(self, principal: Principal) -> Iterator[psycopg.Connection]:
        """A pooled connection in a read-only transaction for ``principal`` (rolled back at the end)."""
        pool = self._open()
        try:
            with pool.connection() as conn, read_as(conn, principal):
                yield conn
        except psycopg.OperationalError as exc:
            raise StoreError(f"database error at {self.location}: {exc}") from exc

    def close(self, stop_server: bool = False) -> None:
        """Close the pool; with ``stop_server``, also stop the embedded server this instance started,
        unless another client is still connected to it (it keeps running for that one)."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
            if stop_server and self._started_server and self._dsn is not None:
                if other_clients(self._dsn):
                    logger.info("embedded PostgreSQL left running: another client is connected")
                else:
                    stop_embedded(self._data_dir)
                self._started_server = False
                self._dsn = None
