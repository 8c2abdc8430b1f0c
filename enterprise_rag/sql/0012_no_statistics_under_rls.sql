-- No column statistics on the row-secured tables.
--
-- The planner uses a column's statistics for leakproof operators (text =, <, ^@, integer and
-- time comparisons) also when row-level security hides the rows they describe, and EXPLAIN shows
-- the resulting estimate: walking "text < prefix" recovered forbidden chunk texts word for word.
-- So no statistics are gathered for any text-bearing column of a table with row-level security
-- (target 0: ANALYZE and autovacuum skip it: text, arrays, tsvector, jsonb, vectors, timestamps)
-- and those already gathered are cleared. Boolean and numeric columns keep theirs: they describe
-- counts and sizes (leaf or not, levels, positions, term frequencies, lengths, token counts), never
-- a word, and the planner needs them. Measured with benchmarks/rls_latency.py (30k leaves, p50):
-- with every column's statistics off, the text side of a selective search went from 22 to 57 ms
-- and retrieve() of a broad one from 132 to 234 ms; without the numeric columns' only, nothing
-- moved beyond noise. Still visible to every role: each table's and index's row and page counts in
-- pg_class, and those numeric distributions. A later migration that adds a column re-runs
-- rag_no_statistics().

CREATE FUNCTION rag_no_statistics() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    col record;
BEGIN
    FOR col IN
        SELECT c.relname, a.attname
        FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND c.relrowsecurity
          AND a.attnum > 0 AND NOT a.attisdropped AND a.atttypid NOT IN ('bool'::regtype, 'int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'float4'::regtype, 'float8'::regtype)
    LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS 0', col.relname, col.attname);
        PERFORM pg_clear_attribute_stats(current_schema(), col.relname, col.attname, false);
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION rag_no_statistics() FROM PUBLIC;
SELECT rag_no_statistics();
