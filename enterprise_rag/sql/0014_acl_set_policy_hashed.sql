-- The policies of 0013 on the BM25 statistics, as a hashed membership test.
--
-- acl_id = ANY(array) compares each posting with every visible set id in turn; a broad principal
-- of benchmarks/rls_latency.py sees ~50 sets, and the text half under the wall went from 40 to
-- 462 ms (p50, 30k leaves). IN (subquery) is planned as a hashed SubPlan: one probe per row.
ALTER POLICY rag_bm25_terms_read ON rag_bm25_terms
    USING (acl_id IN (SELECT unnest(rag_signed_acl_ids())));
ALTER POLICY rag_bm25_postings_read ON rag_bm25_postings
    USING (acl_id IN (SELECT unnest(rag_signed_acl_ids())));
