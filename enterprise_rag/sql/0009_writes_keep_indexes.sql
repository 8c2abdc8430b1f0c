-- Writes keep every index and the BM25 triggers in place (enterprise_rag/store/writer.py): the bulk
-- path of 0007, which dropped the indexes inside the write transaction and rebuilt them at commit,
-- held an exclusive lock on rag_nodes for the whole write, so every concurrent query waited for it.
DROP FUNCTION rag_suspend_index_maintenance();
DROP FUNCTION rag_restore_index_maintenance();
DROP FUNCTION rag_require_service();
DROP TABLE rag_deferred_indexes;
