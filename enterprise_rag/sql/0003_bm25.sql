-- BM25 for the full-text half of hybrid search, and the size of each ACL name's scope.
--
-- ts_rank has no IDF, so common words dominate an OR query. BM25 needs, per leaf, the term
-- frequency of each lexeme and the leaf's length, and corpus-wide the document frequency of
-- each lexeme, the number of leaves and their total length. They live here:
--   rag_bm25_postings  one row per (lexeme, leaf): occurrences in the breadcrumb (weight A) and
--                      in the body (other weights), and the leaf's length; read through its primary
--                      key (an index-only scan per query lexeme), so only leaves holding a query
--                      lexeme are ever scored.
--   rag_bm25_terms     lexeme -> number of leaves containing it (df); rows with df 0 are removed.
--   rag_bm25_stats     one row: number of leaves and their total length (for avgdl).
-- Length = number of indexed tokens (positions) of the leaf's tsv, breadcrumb included.
--   rag_acl_leaf_counts  group or user name -> number of leaves whose ACL names it. Search sums
--                      them over a principal's names (an upper bound of what it may see) to pick,
--                      without scanning, between starting from the principal's scope (small) and
--                      from the indexes (broad).
--
-- Statement-level triggers on rag_nodes keep all of it exact in the same transaction as the
-- node write, whatever the path: the writer's COPY and DELETE, the cascade from rag_documents,
-- raw SQL, TRUNCATE. Every maintaining statement first updates the rag_bm25_stats row, so
-- writers of nodes serialise there (no deadlock between term rows). Updates that change neither
-- a leaf's tsv nor its ACL (e.g. a status change) touch no statistics and take no lock.
-- rag_bm25_rebuild() recounts everything from rag_nodes (used for the backfill below).

-- A compact key for the postings. Adding it rewrites rag_nodes once (and rebuilds its indexes),
-- and the rewrite also applies the storage change below to existing rows.
-- Embeddings are kept inline in the row when it fits (STORAGE MAIN; text and tsv are compressed
-- or moved out first): an exact scan of a small scope then reads no TOAST (pgvector's advice).
SET LOCAL maintenance_work_mem = '512MB';  -- the rewrite rebuilds the HNSW index
ALTER TABLE rag_nodes ALTER COLUMN embedding SET STORAGE MAIN;
ALTER TABLE rag_nodes ADD COLUMN node_seq bigint GENERATED ALWAYS AS IDENTITY;
CREATE UNIQUE INDEX rag_nodes_node_seq ON rag_nodes (node_seq);

CREATE TABLE rag_bm25_stats (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    leaves       bigint NOT NULL DEFAULT 0 CHECK (leaves >= 0),
    total_length bigint NOT NULL DEFAULT 0 CHECK (total_length >= 0)
);
INSERT INTO rag_bm25_stats DEFAULT VALUES;

CREATE TABLE rag_bm25_terms (
    lexeme text PRIMARY KEY,
    df     integer NOT NULL CHECK (df >= 0)
);

CREATE TABLE rag_acl_leaf_counts (
    kind   "char" NOT NULL CHECK (kind IN ('g', 'u')),  -- g: allowed_groups, u: allowed_users
    name   text NOT NULL,
    leaves bigint NOT NULL CHECK (leaves >= 0),
    PRIMARY KEY (kind, name)
);

CREATE TABLE rag_bm25_postings (
    lexeme   text NOT NULL,
    node_seq bigint NOT NULL,
    tf_a     smallint NOT NULL,
    tf_b     smallint NOT NULL,
    length   integer NOT NULL,
    CONSTRAINT rag_bm25_postings_pkey PRIMARY KEY (lexeme, node_seq) INCLUDE (tf_a, tf_b, length)
);

-- SQL below computes, per leaf and lexeme u of unnest(tsv): occurrences in the breadcrumb
-- tf_a = cardinality(array_positions(u.weights, 'A')), all occurrences greatest(cardinality(u.positions), 1)
-- (a lexeme stored without positions counts once), and the leaf's length = their sum over its
-- lexemes. Written inline, not as SQL functions: those are not inlined here and cost 20x more.

-- The ACL entries of a set of rows (is_leaf, allowed_groups, allowed_users, sign), netted per name.
CREATE FUNCTION rag_acl_delta_sql(rows_sql text) RETURNS text LANGUAGE sql IMMUTABLE
    RETURN format(
        'SELECT e.kind, e.name, sum(e.sign)::bigint AS n FROM (
             SELECT ''g''::"char" AS kind, g.name, a.sign
             FROM (%1$s) a CROSS JOIN LATERAL (SELECT DISTINCT x AS name FROM unnest(a.allowed_groups) x) g
             WHERE a.is_leaf
             UNION ALL
             SELECT ''u''::"char", u.name, a.sign
             FROM (%1$s) a CROSS JOIN LATERAL (SELECT DISTINCT x AS name FROM unnest(a.allowed_users) x) u
             WHERE a.is_leaf) e
         GROUP BY e.kind, e.name HAVING sum(e.sign) <> 0', rows_sql);

-- Keeps the statistics in step with a statement's changed rows, read from the trigger's
-- transition tables. ``delta`` yields the leaves whose text vector arrives (+1) or goes (-1) as
-- (node_seq, tsv, sign); for an UPDATE only rows whose leaf text vector really changed count.
-- ``acl`` yields the ACL names of leaves arriving and going, netted per name.
CREATE FUNCTION rag_bm25_sync() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    delta text;
    acl text;
    has_delta boolean;
    has_acl boolean;
BEGIN
    IF TG_OP = 'INSERT' THEN
        delta := 'SELECT node_seq, tsv, 1 AS sign FROM rag_new WHERE is_leaf AND tsv IS NOT NULL';
        acl := rag_acl_delta_sql('SELECT is_leaf, allowed_groups, allowed_users, 1 AS sign FROM rag_new');
    ELSIF TG_OP = 'DELETE' THEN
        delta := 'SELECT node_seq, tsv, -1 AS sign FROM rag_old WHERE is_leaf AND tsv IS NOT NULL';
        acl := rag_acl_delta_sql('SELECT is_leaf, allowed_groups, allowed_users, -1 AS sign FROM rag_old');
    ELSE
        delta := $q$
            SELECT o.node_seq, o.tsv, -1 AS sign FROM rag_old o
            WHERE o.is_leaf AND o.tsv IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM rag_new n WHERE n.node_seq = o.node_seq AND n.is_leaf AND n.tsv = o.tsv)
            UNION ALL
            SELECT n.node_seq, n.tsv, 1 AS sign FROM rag_new n
            WHERE n.is_leaf AND n.tsv IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM rag_old o WHERE o.node_seq = n.node_seq AND o.is_leaf AND o.tsv = n.tsv)$q$;
        acl := rag_acl_delta_sql(
            'SELECT is_leaf, allowed_groups, allowed_users, -1 AS sign FROM rag_old
             UNION ALL SELECT is_leaf, allowed_groups, allowed_users, 1 FROM rag_new');
    END IF;
    EXECUTE format('SELECT EXISTS (%s), EXISTS (%s)', delta, acl) INTO has_delta, has_acl;
    IF NOT (has_delta OR has_acl) THEN
        RETURN NULL;
    END IF;
    -- 1. leaf count and total length; this row lock serialises maintainers (always taken first)
    EXECUTE format(
        'UPDATE rag_bm25_stats
         SET leaves = leaves + (SELECT coalesce(sum(d.sign), 0) FROM (%1$s) d),
             total_length = total_length + (SELECT coalesce(sum(d.sign * greatest(cardinality(u.positions), 1)), 0)
                                            FROM (%1$s) d, unnest(d.tsv) u)', delta);
    -- 2. leaves per ACL name: known names are updated, new ones inserted, zeros removed
    IF has_acl THEN
        EXECUTE format(
            'WITH c AS (%s),
                  known AS (UPDATE rag_acl_leaf_counts t SET leaves = t.leaves + c.n FROM c
                            WHERE t.kind = c.kind AND t.name = c.name RETURNING t.kind, t.name)
             INSERT INTO rag_acl_leaf_counts (kind, name, leaves)
             SELECT c.kind, c.name, c.n FROM c
             WHERE NOT EXISTS (SELECT 1 FROM known k WHERE k.kind = c.kind AND k.name = c.name)', acl);
        DELETE FROM rag_acl_leaf_counts WHERE leaves = 0;
    END IF;
    IF NOT has_delta THEN
        RETURN NULL;
    END IF;
    -- 3. document frequencies (net change per lexeme): known lexemes are updated, new ones inserted
    --    (no race: maintainers are serialised by step 1). A count going negative is a CHECK
    --    violation, so statistics out of step fail loudly instead of drifting.
    EXECUTE format(
        'WITH c AS (SELECT u.lexeme, sum(d.sign)::integer AS n FROM (%s) d, unnest(d.tsv) u
                    GROUP BY u.lexeme HAVING sum(d.sign) <> 0),
              known AS (UPDATE rag_bm25_terms t SET df = t.df + c.n FROM c WHERE t.lexeme = c.lexeme
                        RETURNING t.lexeme)
         INSERT INTO rag_bm25_terms (lexeme, df)
         SELECT c.lexeme, c.n FROM c WHERE NOT EXISTS (SELECT 1 FROM known k WHERE k.lexeme = c.lexeme)',
        delta);
    -- 4. postings of the leaves that go, then of those that arrive
    IF TG_OP <> 'INSERT' THEN
        EXECUTE format(
            'DELETE FROM rag_bm25_postings p USING (%s) d, unnest(d.tsv) u
             WHERE d.sign < 0 AND p.lexeme = u.lexeme AND p.node_seq = d.node_seq', delta);
        EXECUTE format(
            'DELETE FROM rag_bm25_terms t
             USING (SELECT DISTINCT u.lexeme FROM (%s) d, unnest(d.tsv) u WHERE d.sign < 0) r
             WHERE t.lexeme = r.lexeme AND t.df = 0', delta);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        EXECUTE format(
            'INSERT INTO rag_bm25_postings (lexeme, node_seq, tf_a, tf_b, length)
             SELECT u.lexeme, d.node_seq, cardinality(array_positions(u.weights, ''A'')),
                    greatest(cardinality(u.positions), 1) - cardinality(array_positions(u.weights, ''A'')), l.len
             FROM (%s) d
             CROSS JOIN LATERAL (SELECT coalesce(sum(greatest(cardinality(x.positions), 1)), 0)::integer AS len
                                 FROM unnest(d.tsv) x) l
             CROSS JOIN LATERAL unnest(d.tsv) u
             WHERE d.sign > 0', delta);
    END IF;
    RETURN NULL;
END
$fn$;

CREATE FUNCTION rag_bm25_truncated() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE rag_bm25_stats SET leaves = 0, total_length = 0;
    TRUNCATE rag_bm25_terms, rag_bm25_postings, rag_acl_leaf_counts;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER rag_bm25_insert AFTER INSERT ON rag_nodes
    REFERENCING NEW TABLE AS rag_new FOR EACH STATEMENT EXECUTE FUNCTION rag_bm25_sync();
CREATE TRIGGER rag_bm25_delete AFTER DELETE ON rag_nodes
    REFERENCING OLD TABLE AS rag_old FOR EACH STATEMENT EXECUTE FUNCTION rag_bm25_sync();
CREATE TRIGGER rag_bm25_update AFTER UPDATE ON rag_nodes
    REFERENCING OLD TABLE AS rag_old NEW TABLE AS rag_new FOR EACH STATEMENT EXECUTE FUNCTION rag_bm25_sync();
CREATE TRIGGER rag_bm25_truncate AFTER TRUNCATE ON rag_nodes
    FOR EACH STATEMENT EXECUTE FUNCTION rag_bm25_truncated();

-- Recount everything from rag_nodes: the backfill of existing stores, and the repair tool or the
-- last step of a bulk load done with the triggers disabled. Blocks node writes, and readers of
-- the statistics, until the transaction ends.
CREATE FUNCTION rag_bm25_rebuild() RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    LOCK TABLE rag_nodes IN SHARE MODE;
    TRUNCATE rag_bm25_postings, rag_bm25_terms, rag_acl_leaf_counts;
    -- bulk: load the postings unindexed, then build the primary key in one sort
    ALTER TABLE rag_bm25_postings DROP CONSTRAINT rag_bm25_postings_pkey;
    INSERT INTO rag_bm25_postings (lexeme, node_seq, tf_a, tf_b, length)
        SELECT u.lexeme, n.node_seq, cardinality(array_positions(u.weights, 'A')),
               greatest(cardinality(u.positions), 1) - cardinality(array_positions(u.weights, 'A')), l.len
        FROM rag_nodes n
        CROSS JOIN LATERAL (SELECT coalesce(sum(greatest(cardinality(x.positions), 1)), 0)::integer AS len
                            FROM unnest(n.tsv) x) l
        CROSS JOIN LATERAL unnest(n.tsv) u
        WHERE n.is_leaf AND n.tsv IS NOT NULL;
    ALTER TABLE rag_bm25_postings
        ADD CONSTRAINT rag_bm25_postings_pkey PRIMARY KEY (lexeme, node_seq) INCLUDE (tf_a, tf_b, length);
    INSERT INTO rag_bm25_terms (lexeme, df)
        SELECT lexeme, count(*) FROM rag_bm25_postings GROUP BY lexeme;
    UPDATE rag_bm25_stats s SET leaves = a.n, total_length = a.len
        FROM (SELECT count(*) AS n,
                     coalesce(sum((SELECT sum(greatest(cardinality(x.positions), 1)) FROM unnest(tsv) x)), 0) AS len
              FROM rag_nodes WHERE is_leaf AND tsv IS NOT NULL) a;
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

SELECT rag_bm25_rebuild();
ANALYZE rag_nodes, rag_bm25_postings, rag_bm25_terms, rag_acl_leaf_counts;
