"""Reading and writing documents and chunk nodes in PostgreSQL."""
