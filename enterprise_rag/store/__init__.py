"""PostgreSQL: the embedded server, DSN, migrations, row scoping, and every SQL statement on the core tables."""

from enterprise_rag.store.database import Database
from enterprise_rag.store.migrate import apply_migrations

__all__ = ["Database", "apply_migrations"]
