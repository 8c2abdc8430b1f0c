-- The folder each document was ingested from, so citations can show its source relative to it
-- (source keeps the full path: delete and sync still work by it). '' for documents that are not files.
ALTER TABLE rag_documents ADD COLUMN root text NOT NULL DEFAULT '';
