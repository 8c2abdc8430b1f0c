-- BM25 statistics per ACL set: what a principal's text search counts comes only from leaves it may read.
--
-- 0003 kept one document frequency per lexeme and one leaf count and total length for the whole
-- store. That made the corpus an oracle: which of a question's words are kept (the rarest
-- bm25_max_terms by df) and every IDF depended on documents the principal cannot read, so a
-- readable leaf's score said whether a word occurs in a forbidden one, and inside a signed read a
-- plain SELECT on rag_bm25_terms or rag_bm25_postings listed the words of the whole store.
--
-- Now the statistics are kept per ACL set, the distinct (allowed_groups, allowed_users) pairs of
-- the leaves (arrays as stored; the ingest path stores them sorted and unique, so one ACL is one
-- set):
--   rag_acl_sets       acl_id -> the pair, its number of leaves and their total length. It also
--                      replaces rag_acl_leaf_counts: the leaves a principal may see are the sum
--                      over its visible sets, exact (the per-name counts were an upper bound).
--   rag_bm25_terms     (lexeme, acl_id) -> number of the set's leaves containing the lexeme.
--   rag_bm25_postings  gains the leaf's acl_id.
-- A search sums the sets the principal may read (enterprise_rag/store/search.py): its df, leaf
-- count and average length are those of its readable corpus, so adding or removing a document it
-- cannot read changes none of its scores or ranks. Row-level security gives the reader role only
-- the rows of its visible sets in all three tables. rag_bm25_stats goes: its totals were
-- corpus-wide; maintainers now serialise on a lock of rag_acl_sets, taken first.

SET LOCAL maintenance_work_mem = '512MB';

DROP TABLE rag_bm25_stats, rag_acl_leaf_counts, rag_bm25_terms, rag_bm25_postings;

CREATE TABLE rag_acl_sets (
    acl_id         integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    allowed_groups text[] NOT NULL,
    allowed_users  text[] NOT NULL,
    leaves         bigint NOT NULL DEFAULT 0 CHECK (leaves >= 0),
    total_length   bigint NOT NULL DEFAULT 0 CHECK (total_length >= 0),
    UNIQUE (allowed_groups, allowed_users)
);

CREATE TABLE rag_bm25_terms (
    lexeme text NOT NULL,
    acl_id integer NOT NULL,
    df     integer NOT NULL CHECK (df >= 0),
    CONSTRAINT rag_bm25_terms_pkey PRIMARY KEY (lexeme, acl_id) INCLUDE (df)
);

CREATE TABLE rag_bm25_postings (
    lexeme   text NOT NULL,
    node_seq bigint NOT NULL,
    acl_id   integer NOT NULL,
    tf_a     smallint NOT NULL,
    tf_b     smallint NOT NULL,
    length   integer NOT NULL,
    CONSTRAINT rag_bm25_postings_pkey PRIMARY KEY (lexeme, node_seq) INCLUDE (acl_id, tf_a, tf_b, length)
);

-- Keeps the statistics in step with a statement's changed rows, read from the trigger's
-- transition tables. ``delta`` yields the leaves arriving (+1) or going (-1) as (node_seq, tsv,
-- allowed_groups, allowed_users, sign); for an UPDATE only rows whose text vector or ACL really
-- changed count. ``counted`` is the same with each leaf's acl_id and length.
CREATE OR REPLACE FUNCTION rag_bm25_sync() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    delta text;
    counted text;
    has_delta boolean;
BEGIN
    IF TG_OP = 'INSERT' THEN
        delta := 'SELECT node_seq, tsv, allowed_groups, allowed_users, 1 AS sign FROM rag_new WHERE is_leaf';
    ELSIF TG_OP = 'DELETE' THEN
        delta := 'SELECT node_seq, tsv, allowed_groups, allowed_users, -1 AS sign FROM rag_old WHERE is_leaf';
    ELSE
        delta := $q$
            SELECT o.node_seq, o.tsv, o.allowed_groups, o.allowed_users, -1 AS sign FROM rag_old o
            WHERE o.is_leaf AND NOT EXISTS (
                SELECT 1 FROM rag_new n WHERE n.node_seq = o.node_seq AND n.is_leaf AND n.tsv = o.tsv
                    AND n.allowed_groups = o.allowed_groups AND n.allowed_users = o.allowed_users)
            UNION ALL
            SELECT n.node_seq, n.tsv, n.allowed_groups, n.allowed_users, 1 AS sign FROM rag_new n
            WHERE n.is_leaf AND NOT EXISTS (
                SELECT 1 FROM rag_old o WHERE o.node_seq = n.node_seq AND o.is_leaf AND o.tsv = n.tsv
                    AND o.allowed_groups = n.allowed_groups AND o.allowed_users = n.allowed_users)$q$;
    END IF;
    EXECUTE format('SELECT EXISTS (%s)', delta) INTO has_delta;
    IF NOT has_delta THEN
        RETURN NULL;
    END IF;
    -- 1. maintainers serialise here (no deadlock between term rows); readers are not blocked
    LOCK TABLE rag_acl_sets IN SHARE ROW EXCLUSIVE MODE;
    -- 2. the sets of arriving leaves exist, then every changed leaf has its set's id and its length
    EXECUTE format(
        'INSERT INTO rag_acl_sets (allowed_groups, allowed_users)
         SELECT DISTINCT d.allowed_groups, d.allowed_users FROM (%s) d WHERE d.sign > 0
         ON CONFLICT DO NOTHING', delta);
    counted := format(
        'SELECT d.node_seq, d.tsv, d.sign, s.acl_id, l.len
         FROM (%s) d
         JOIN rag_acl_sets s ON s.allowed_groups = d.allowed_groups AND s.allowed_users = d.allowed_users
         CROSS JOIN LATERAL (SELECT coalesce(sum(greatest(cardinality(x.positions), 1)), 0)::integer AS len
                             FROM unnest(d.tsv) x) l', delta);
    -- 3. leaves and total length per set
    EXECUTE format(
        'UPDATE rag_acl_sets s SET leaves = s.leaves + c.n, total_length = s.total_length + c.len
         FROM (SELECT d.acl_id, sum(d.sign) AS n, sum(d.sign * d.len) AS len FROM (%s) d GROUP BY d.acl_id) c
         WHERE s.acl_id = c.acl_id', counted);
    -- 4. document frequencies per (lexeme, set), net: known rows are updated, new ones inserted. A
    --    count going negative is a CHECK violation, so statistics out of step fail loudly.
    EXECUTE format(
        'WITH c AS (SELECT u.lexeme, d.acl_id, sum(d.sign)::integer AS n FROM (%s) d, unnest(d.tsv) u
                    GROUP BY u.lexeme, d.acl_id HAVING sum(d.sign) <> 0),
              known AS (UPDATE rag_bm25_terms t SET df = t.df + c.n FROM c
                        WHERE t.lexeme = c.lexeme AND t.acl_id = c.acl_id RETURNING t.lexeme, t.acl_id)
         INSERT INTO rag_bm25_terms (lexeme, acl_id, df)
         SELECT c.lexeme, c.acl_id, c.n FROM c
         WHERE NOT EXISTS (SELECT 1 FROM known k WHERE k.lexeme = c.lexeme AND k.acl_id = c.acl_id)', counted);
    -- 5. postings of the leaves that go (and the counts they leave at zero), then of those that arrive
    IF TG_OP <> 'INSERT' THEN
        EXECUTE format(
            'DELETE FROM rag_bm25_postings p USING (%s) d, unnest(d.tsv) u
             WHERE d.sign < 0 AND p.lexeme = u.lexeme AND p.node_seq = d.node_seq', delta);
        EXECUTE format(
            'DELETE FROM rag_bm25_terms t
             USING (SELECT DISTINCT u.lexeme, d.acl_id FROM (%s) d, unnest(d.tsv) u WHERE d.sign < 0) r
             WHERE t.lexeme = r.lexeme AND t.acl_id = r.acl_id AND t.df = 0', counted);
        EXECUTE format(
            'DELETE FROM rag_acl_sets s USING (SELECT DISTINCT d.acl_id FROM (%s) d WHERE d.sign < 0) r
             WHERE s.acl_id = r.acl_id AND s.leaves = 0', counted);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        EXECUTE format(
            'INSERT INTO rag_bm25_postings (lexeme, node_seq, acl_id, tf_a, tf_b, length)
             SELECT u.lexeme, d.node_seq, d.acl_id, cardinality(array_positions(u.weights, ''A'')),
                    greatest(cardinality(u.positions), 1) - cardinality(array_positions(u.weights, ''A'')), d.len
             FROM (%s) d CROSS JOIN LATERAL unnest(d.tsv) u
             WHERE d.sign > 0', counted);
    END IF;
    RETURN NULL;
END
$fn$;

CREATE OR REPLACE FUNCTION rag_bm25_truncated() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    TRUNCATE rag_bm25_terms, rag_bm25_postings, rag_acl_sets;
    RETURN NULL;
END
$fn$;

-- Recount everything from rag_nodes (the backfill below and the repair tool), in one pass over
-- the leaves: the sets first, then the postings and the document frequencies loaded unindexed,
-- each primary key built in one sort. Blocks node writes until the transaction ends.
CREATE OR REPLACE FUNCTION rag_bm25_rebuild() RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    LOCK TABLE rag_nodes IN SHARE MODE;
    TRUNCATE rag_bm25_postings, rag_bm25_terms, rag_acl_sets;
    INSERT INTO rag_acl_sets (allowed_groups, allowed_users, leaves)
        SELECT allowed_groups, allowed_users, count(*) FROM rag_nodes WHERE is_leaf GROUP BY 1, 2;
    ALTER TABLE rag_bm25_postings DROP CONSTRAINT rag_bm25_postings_pkey;
    ALTER TABLE rag_bm25_terms DROP CONSTRAINT rag_bm25_terms_pkey;
    INSERT INTO rag_bm25_postings (lexeme, node_seq, acl_id, tf_a, tf_b, length)
        SELECT u.lexeme, n.node_seq, s.acl_id, u.tf_a, u.tf - u.tf_a, u.len
        FROM rag_nodes n
        JOIN rag_acl_sets s ON s.allowed_groups = n.allowed_groups AND s.allowed_users = n.allowed_users
        CROSS JOIN LATERAL (
            SELECT x.lexeme, cardinality(array_positions(x.weights, 'A')) AS tf_a,
                   greatest(cardinality(x.positions), 1) AS tf,
                   (sum(greatest(cardinality(x.positions), 1)) OVER ())::integer AS len
            FROM unnest(n.tsv) x) u
        WHERE n.is_leaf;
    ALTER TABLE rag_bm25_postings ADD CONSTRAINT rag_bm25_postings_pkey
        PRIMARY KEY (lexeme, node_seq) INCLUDE (acl_id, tf_a, tf_b, length);
    INSERT INTO rag_bm25_terms (lexeme, acl_id, df)
        SELECT lexeme, acl_id, count(*) FROM rag_bm25_postings GROUP BY lexeme, acl_id;
    ALTER TABLE rag_bm25_terms ADD CONSTRAINT rag_bm25_terms_pkey PRIMARY KEY (lexeme, acl_id) INCLUDE (df);
    UPDATE rag_acl_sets s SET total_length = t.len
        FROM (SELECT acl_id, sum(tf_a::bigint + tf_b) AS len FROM rag_bm25_postings GROUP BY acl_id) t
        WHERE s.acl_id = t.acl_id;
END
$fn$;

-- The ids of the ACL sets the signed principal may read, once per statement (see 0011).
CREATE FUNCTION rag_signed_acl_ids() RETURNS integer[] LANGUAGE sql STABLE PARALLEL RESTRICTED
RETURN (SELECT coalesce(array_agg(a.acl_id), '{}') FROM rag_acl_sets a
        WHERE a.allowed_groups && (SELECT rag_signed_groups())
           OR a.allowed_users && (SELECT array_remove(rag_signed_user_ids(), '')));

ALTER TABLE rag_acl_sets ENABLE ROW LEVEL SECURITY;
ALTER TABLE rag_bm25_terms ENABLE ROW LEVEL SECURITY;
ALTER TABLE rag_bm25_postings ENABLE ROW LEVEL SECURITY;
CREATE POLICY rag_acl_sets_read ON rag_acl_sets FOR SELECT TO enterprise_rag_reader
    USING (allowed_groups && (SELECT rag_signed_groups())
           OR allowed_users && (SELECT array_remove(rag_signed_user_ids(), '')));
CREATE POLICY rag_bm25_terms_read ON rag_bm25_terms FOR SELECT TO enterprise_rag_reader
    USING (acl_id = ANY((SELECT rag_signed_acl_ids())::integer[]));
CREATE POLICY rag_bm25_postings_read ON rag_bm25_postings FOR SELECT TO enterprise_rag_reader
    USING (acl_id = ANY((SELECT rag_signed_acl_ids())::integer[]));
GRANT SELECT ON rag_acl_sets, rag_bm25_terms, rag_bm25_postings TO enterprise_rag_reader, enterprise_rag_writer;

DO $owner$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['rag_acl_sets', 'rag_bm25_terms', 'rag_bm25_postings'] LOOP
        EXECUTE format('CREATE POLICY %I ON %I FOR ALL TO enterprise_rag_writer'
                       ' USING ((SELECT rag_signed(''service''))) WITH CHECK ((SELECT rag_signed(''service'')))',
                       t || '_service', t);
    END LOOP;
    -- CREATE OR REPLACE reset these: owner functions again, with a pinned search_path (pg_temp last)
    FOREACH t IN ARRAY ARRAY['rag_bm25_sync()', 'rag_bm25_truncated()', 'rag_bm25_rebuild()'] LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = %I, pg_temp', t, current_schema());
    END LOOP;
END
$owner$;

SELECT rag_bm25_rebuild();
SELECT rag_no_statistics();
ANALYZE rag_acl_sets, rag_bm25_terms, rag_bm25_postings;
