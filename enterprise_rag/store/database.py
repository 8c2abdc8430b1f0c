"""Connections to the store: resolves the DSN (external or embedded), migrates, pools."""

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
from enterprise_rag.store.embedded import start_embedded
from enterprise_rag.store.migrate import apply_migrations

logger = logging.getLogger(__name__)


class Database:
    """A lazily opened, migrated connection pool whose connections know pgvector's types.

    Nothing connects in the constructor; the first :meth:`connection` starts the
    embedded server when no DSN is configured, applies migrations, and opens the pool.
    """

    def __init__(self, settings: DatabaseSettings, data_dir: Path, embed_dim: int) -> None:
        self._settings = settings
        self._data_dir = data_dir
        self._embed_dim = embed_dim
        self._pool: ConnectionPool | None = None
        self._dsn: str | None = None
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
        """The DSN to connect with (starts the embedded server if needed)."""
        if self._dsn is None:
            if self._settings.dsn is not None:
                self._dsn = self._settings.dsn.get_secret_value()
            else:
                self._dsn = start_embedded(self._data_dir, self._settings.embedded_shared_buffers_mb)
        return self._dsn

    def _open(self) -> ConnectionPool:
        with self._lock:
            if self._pool is not None:
                return self._pool
            dsn = self.dsn()
            try:
                with psycopg.connect(dsn, connect_timeout=int(self._settings.connect_timeout_s)) as conn:
                    apply_migrations(conn, self._embed_dim, self._settings.text_search_config)
            except psycopg.OperationalError as exc:
                raise StoreError(f"cannot connect to PostgreSQL at {self.location}: {exc}") from exc
            pool = ConnectionPool(
                dsn,
                min_size=self._settings.pool_min_size,
                max_size=self._settings.pool_max_size,
                timeout=self._settings.connect_timeout_s,
                open=False,
                check=ConnectionPool.check_connection,
                # pgvector's adapters on every connection: numpy arrays go in as binary vectors and
                # vector columns come back as pgvector Vectors. The type exists once the migrations
                # above ran; the adapters are bound to its OID, so they serve read_as's role too.
                configure=register_vector,
            )
            pool.open(wait=False)
            self._pool = pool
            return pool

    def migrate(self) -> list[str]:
        """Apply pending migrations now; return the files applied."""
        with psycopg.connect(self.dsn()) as conn:
            return apply_migrations(conn, self._embed_dim, self._settings.text_search_config)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled connection; the block runs in a transaction committed on success."""
        pool = self._open()
        try:
            with pool.connection() as conn:
                yield conn
        except psycopg.OperationalError as exc:
            raise StoreError(f"database error at {self.location}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
