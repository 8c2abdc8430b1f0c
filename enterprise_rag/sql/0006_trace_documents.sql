-- The documents a trace's run retrieved from, so that reading the trace later can check them
-- against the reader's permissions then (enterprise_rag/store/traces.py redacts what the reader
-- can no longer read). NULL: a trace written before this column existed, documents unknown.
ALTER TABLE rag_traces ADD COLUMN document_ids text[];
