"""Permission-scoped hybrid retrieval: SQL fusion, parent merging, rerank, query transforms."""
