"""The store: embedded or external PostgreSQL, migrations, connection pool."""

from enterprise_rag.db.database import Database
from enterprise_rag.db.migrate import apply_migrations

__all__ = ["Database", "apply_migrations"]
