-- rag_bm25_rebuild() (sql/0003_bm25.sql), faster, with the same results. A bulk write recounts
-- the statistics with it in its own transaction (enterprise_rag/store/writer.py), so its time is
-- part of every large ingest. What changes:
--   * each leaf's tsv is read from TOAST and unnested once instead of three times: the leaf's
--     length is a window sum over the same unnest, and the corpus total length is summed from the
--     new postings (tf_a + tf_b of a posting is greatest(cardinality(positions), 1) of its lexeme,
--     so their sum over all postings is the sum of the leaves' lengths; a leaf with an empty tsv has
--     no posting and length 0 either way);
--   * rag_bm25_terms, like the postings, is loaded without its primary key, which is then built in
--     one sort.
-- The triggers of 0003 are unchanged; tests/test_bm25.py checks that this recount equals both the
-- trigger-maintained statistics and an independent recount in Python.
CREATE OR REPLACE FUNCTION rag_bm25_rebuild() RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    LOCK TABLE rag_nodes IN SHARE MODE;
    TRUNCATE rag_bm25_postings, rag_bm25_terms, rag_acl_leaf_counts;
    -- bulk: load both tables unindexed, then build each primary key in one sort
    ALTER TABLE rag_bm25_postings DROP CONSTRAINT rag_bm25_postings_pkey;
    ALTER TABLE rag_bm25_terms DROP CONSTRAINT rag_bm25_terms_pkey;
    INSERT INTO rag_bm25_postings (lexeme, node_seq, tf_a, tf_b, length)
        SELECT u.lexeme, n.node_seq, u.tf_a, u.tf - u.tf_a, u.len
        FROM rag_nodes n
        CROSS JOIN LATERAL (
            SELECT x.lexeme, cardinality(array_positions(x.weights, 'A')) AS tf_a,
                   greatest(cardinality(x.positions), 1) AS tf,
                   (sum(greatest(cardinality(x.positions), 1)) OVER ())::integer AS len
            FROM unnest(n.tsv) x) u
        WHERE n.is_leaf AND n.tsv IS NOT NULL;
    ALTER TABLE rag_bm25_postings
        ADD CONSTRAINT rag_bm25_postings_pkey PRIMARY KEY (lexeme, node_seq) INCLUDE (tf_a, tf_b, length);
    INSERT INTO rag_bm25_terms (lexeme, df)
        SELECT lexeme, count(*) FROM rag_bm25_postings GROUP BY lexeme;
    ALTER TABLE rag_bm25_terms ADD CONSTRAINT rag_bm25_terms_pkey PRIMARY KEY (lexeme);
    UPDATE rag_bm25_stats
    SET leaves = (SELECT count(*) FROM rag_nodes WHERE is_leaf AND tsv IS NOT NULL),
        total_length = (SELECT coalesce(sum(tf_a::bigint + tf_b), 0) FROM rag_bm25_postings);
    INSERT INTO rag_acl_leaf_counts (kind, name, leaves)
        SELECT 'g', g.name, count(*)
        FROM rag_nodes n CROSS JOIN LATERAL (SELECT DISTINCT x AS name FROM unnest(n.allowed_groups) x) g
        WHERE n.is_leaf GROUP BY g.name
        UNION ALL
        SELECT 'u', u.name, count(*)
        FROM rag_nodes n CROSS JOIN LATERAL (SELECT DISTINCT x AS name FROM unnest(n.allowed_users) x) u
        WHERE n.is_leaf GROUP BY u.name;
END
$fn$;
