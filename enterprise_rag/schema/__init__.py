"""The result and document types every layer shares; plain data and their notebook renderings."""
