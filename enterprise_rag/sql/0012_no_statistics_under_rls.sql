-- No column statistics on the row-secured tables.
--
-- The planner uses a column's statistics for leakproof operators (text =, <, ^@, integer and
-- time comparisons) also when row-level security hides the rows they describe, and EXPLAIN shows
-- the resulting estimate: walking "text < prefix" recovered forbidden chunk texts word for word.
-- So no statistics are gathered for any column of a table with row-level security (target 0:
-- ANALYZE and autovacuum skip it) and those already gathered are cleared. The package's own
-- statements plan from their structure (gated branches, fenced lookups, bound ACL values), not
-- from these estimates; under row-level security the non-leakproof ones (arrays, tsvector, jsonb)
-- were never usable anyway. One exception: rag_nodes.is_leaf, whose statistics (the share of
-- leaves) let the planner cost the HNSW scan of the broad search (without them it sorted every
-- leaf instead); that share is in pg_class already (the row counts of rag_nodes and of its
-- leaves-only index rag_nodes_content_hash). What stays visible to every role: each table's and
-- index's row and page counts in pg_class. A later migration that adds a column re-runs
-- rag_no_statistics().

CREATE FUNCTION rag_no_statistics() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    col record;
BEGIN
    FOR col IN
        SELECT c.relname, a.attname
        FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND c.relrowsecurity
          AND a.attnum > 0 AND NOT a.attisdropped AND (c.relname, a.attname) <> ('rag_nodes', 'is_leaf')
    LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS 0', col.relname, col.attname);
        PERFORM pg_clear_attribute_stats(current_schema(), col.relname, col.attname, false);
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION rag_no_statistics() FROM PUBLIC;
SELECT rag_no_statistics();
