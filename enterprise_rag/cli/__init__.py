"""The ``enterprise-rag`` command line, over the public API only."""

from enterprise_rag.cli.commands import app, main

__all__ = ["app", "main"]
