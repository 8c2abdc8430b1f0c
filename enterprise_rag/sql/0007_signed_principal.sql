-- The second wall made to hold against SQL run in the package's own sessions.
--
-- 0004 switched a session of the tables' owner to the reader role and put the principal in
-- settings any session may set: SQL run in that session could RESET ROLE back to the owner, or
-- set a principal of its choice. Now:
--
--   * The package connects as a login role of its own per database (made by
--     enterprise_rag/store/credentials.py after the migrations, as the owner): NOSUPERUSER,
--     NOBYPASSRLS, NOINHERIT, owner of nothing, member of enterprise_rag_reader and of
--     enterprise_rag_writer below. NOINHERIT: as itself it holds no privilege on any table, so
--     RESET ROLE leaves a session that can read nothing, and it may SET ROLE to no other role.
--   * Every transaction states who it acts for in settings (enterprise_rag.kind 'principal' or
--     'service', .user_id, .groups) plus enterprise_rag.sig: an HMAC-SHA256, under a key kept in
--     rag_secrets (the owner's alone), over those settings, the backend pid and the
--     transaction's start time. rag_signed(kind) checks it. The key never enters a session's
--     SQL: the package signs in Python (enterprise_rag/store/scoping.py), so SQL in the session
--     can change the settings but never re-sign them, and a signature is good for its own
--     transaction only.
--   * Reads for a user (role enterprise_rag_reader): the policies of 0004 also need a signed
--     'principal'. The package's own work, writes and corpus-wide reads (role
--     enterprise_rag_writer): policies that need a signed 'service'.
--   * DDL the package needs at run time (the bulk write's index rebuild, the BM25 recount) and
--     the BM25 triggers run in owner functions (SECURITY DEFINER) that check the signature.
--
-- The check is an InitPlan, evaluated once per statement: (SELECT rag_signed(...)). The principal
-- functions of 0004 stay plain inlinable SQL, so the planner still folds the principal's values
-- into its row estimates.

DO $role$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'enterprise_rag_writer') THEN
        BEGIN
            CREATE ROLE enterprise_rag_writer NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;  -- another store's migration on this server created it a moment ago
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION USING MESSAGE = format(
                    'user %s may not create the service role: have an administrator run "CREATE ROLE '
                    'enterprise_rag_writer NOLOGIN NOBYPASSRLS NOINHERIT; GRANT enterprise_rag_writer TO %I '
                    'WITH ADMIN OPTION; GRANT enterprise_rag_reader TO %I WITH ADMIN OPTION", then start again',
                    current_user, current_user, current_user);
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'enterprise_rag_writer' AND (rolsuper OR rolbypassrls)) THEN
        RAISE EXCEPTION 'role enterprise_rag_writer is SUPERUSER or BYPASSRLS: row-level security would not bind it';
    END IF;
    IF NOT pg_has_role(current_user, 'enterprise_rag_writer', 'MEMBER') THEN
        BEGIN
            EXECUTE format('GRANT enterprise_rag_writer TO %I', current_user);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION USING MESSAGE = format(
                'user %s may not switch to the service role: have an administrator run '
                '"GRANT enterprise_rag_writer TO %I WITH ADMIN OPTION", then start again', current_user, current_user);
        END;
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO enterprise_rag_writer', current_schema());
END
$role$;

-- One row: the signing key (with its HMAC pads) and the login role's password. Owner only.
CREATE TABLE rag_secrets (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    signing_key  bytea NOT NULL CHECK (length(signing_key) = 32),
    key_ipad     bytea NOT NULL CHECK (length(key_ipad) = 64),
    key_opad     bytea NOT NULL CHECK (length(key_opad) = 64),
    app_password text NOT NULL
);
REVOKE ALL ON rag_secrets FROM PUBLIC;

-- Whether the current transaction's settings are signed for ``kind`` ('principal' or 'service').
-- The signed message: kind, user_id, groups, backend pid, transaction start in microseconds since
-- the epoch, joined by U+001F. A standard SQL body: its references are bound when it is created,
-- so no search_path can substitute another rag_secrets.
CREATE FUNCTION rag_signed(kind text) RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED
RETURN coalesce(
    current_setting('enterprise_rag.kind', true) = kind
    AND current_setting('enterprise_rag.sig', true) ~ '^[0-9a-f]{64}$'
    AND (SELECT sha256(s.key_opad || sha256(s.key_ipad || convert_to(concat_ws(chr(31),
                kind,
                coalesce(current_setting('enterprise_rag.user_id', true), ''),
                coalesce(current_setting('enterprise_rag.groups', true), ''),
                pg_backend_pid()::text,
                (extract(epoch FROM transaction_timestamp()) * 1000000)::bigint::text), 'UTF8')))
            = decode(current_setting('enterprise_rag.sig', true), 'hex')
         FROM rag_secrets s),
    false);

-- Reads for a user: 0004's policies, now only under a signed principal.
ALTER POLICY rag_documents_read ON rag_documents
    USING ((allowed_groups && rag_principal_groups() OR allowed_users && array_remove(rag_principal_user_ids(), ''))
           AND (SELECT rag_signed('principal')));
ALTER POLICY rag_nodes_read ON rag_nodes
    USING ((allowed_groups && rag_principal_groups() OR allowed_users && array_remove(rag_principal_user_ids(), ''))
           AND (SELECT rag_signed('principal')));
ALTER POLICY rag_acl_leaf_counts_read ON rag_acl_leaf_counts
    USING (((kind = 'g' AND name = ANY(rag_principal_groups()))
            OR (kind = 'u' AND name = ANY(array_remove(rag_principal_user_ids(), ''))))
           AND (SELECT rag_signed('principal')));
ALTER POLICY rag_traces_read ON rag_traces
    USING (user_id = ANY(rag_principal_user_ids()) AND (SELECT rag_signed('principal')));
ALTER POLICY rag_trace_steps_read ON rag_trace_steps
    USING (EXISTS (SELECT 1 FROM rag_traces t WHERE t.trace_id = rag_trace_steps.trace_id
                   AND t.user_id = ANY(rag_principal_user_ids())) AND (SELECT rag_signed('principal')));
ALTER POLICY rag_llm_calls_read ON rag_llm_calls
    USING (EXISTS (SELECT 1 FROM rag_traces t WHERE t.trace_id = rag_llm_calls.trace_id
                   AND t.user_id = ANY(rag_principal_user_ids())) AND (SELECT rag_signed('principal')));

-- The BM25 statistics stay corpus-wide for a signed principal (the search needs them; see 0004),
-- and nothing without one.
ALTER TABLE rag_bm25_stats ENABLE ROW LEVEL SECURITY;
ALTER TABLE rag_bm25_terms ENABLE ROW LEVEL SECURITY;
ALTER TABLE rag_bm25_postings ENABLE ROW LEVEL SECURITY;
CREATE POLICY rag_bm25_stats_read ON rag_bm25_stats FOR SELECT TO enterprise_rag_reader
    USING ((SELECT rag_signed('principal')));
CREATE POLICY rag_bm25_terms_read ON rag_bm25_terms FOR SELECT TO enterprise_rag_reader
    USING ((SELECT rag_signed('principal')));
CREATE POLICY rag_bm25_postings_read ON rag_bm25_postings FOR SELECT TO enterprise_rag_reader
    USING ((SELECT rag_signed('principal')));

-- The package's own work: every table, only under a signed service transaction.
ALTER TABLE rag_grade_cache ENABLE ROW LEVEL SECURITY;
ALTER TABLE rag_meta ENABLE ROW LEVEL SECURITY;
ALTER TABLE rag_migrations ENABLE ROW LEVEL SECURITY;
DO $policies$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['rag_documents', 'rag_nodes', 'rag_acl_leaf_counts', 'rag_bm25_stats', 'rag_bm25_terms',
                             'rag_bm25_postings', 'rag_traces', 'rag_trace_steps', 'rag_llm_calls',
                             'rag_grade_cache', 'rag_meta', 'rag_migrations'] LOOP
        EXECUTE format('CREATE POLICY %I ON %I FOR ALL TO enterprise_rag_writer'
                       ' USING ((SELECT rag_signed(''service''))) WITH CHECK ((SELECT rag_signed(''service'')))',
                       t || '_service', t);
    END LOOP;
    EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO enterprise_rag_writer', current_schema());
    -- Owner functions: a pinned search_path (pg_temp last), so no object of a session's can stand in.
    FOREACH t IN ARRAY ARRAY['rag_bm25_sync()', 'rag_bm25_truncated()', 'rag_bm25_rebuild()'] LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = %I, pg_temp', t, current_schema());
    END LOOP;
    EXECUTE format('ALTER FUNCTION rag_signed(text) SET search_path = %I, pg_temp', current_schema());
END
$policies$;
GRANT SELECT, INSERT, UPDATE, DELETE ON rag_documents, rag_nodes, rag_traces, rag_trace_steps, rag_llm_calls,
    rag_grade_cache TO enterprise_rag_writer;
GRANT SELECT ON rag_acl_leaf_counts, rag_bm25_stats, rag_bm25_terms, rag_bm25_postings, rag_meta, rag_migrations
    TO enterprise_rag_writer;

-- The recount drops and rebuilds keys: the owner's (a repair tool), and the bulk restore's below.
REVOKE EXECUTE ON FUNCTION rag_bm25_rebuild() FROM PUBLIC;

-- A bulk write (enterprise_rag/store/writer.py) drops the indexes whose per-row upkeep dominates
-- it and turns the BM25 triggers off, then restores both and recounts once. The definitions wait
-- in an owner-only table, so what runs as the owner is never text a session supplied.
CREATE TABLE rag_deferred_indexes (indexname text PRIMARY KEY, indexdef text NOT NULL);
REVOKE ALL ON rag_deferred_indexes FROM PUBLIC;

-- Refuses (insufficient_privilege) unless the transaction is a signed service one.
CREATE FUNCTION rag_require_service() RETURNS void LANGUAGE plpgsql STABLE AS $fn$
BEGIN
    IF NOT rag_signed('service') THEN
        RAISE EXCEPTION 'not a signed service transaction' USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$fn$;

CREATE FUNCTION rag_suspend_index_maintenance() RETURNS void LANGUAGE plpgsql SECURITY DEFINER AS $fn$
DECLARE
    r record;
BEGIN
    PERFORM rag_require_service();
    FOR r IN SELECT indexname, indexdef FROM pg_indexes
             WHERE schemaname = current_schema() AND tablename = 'rag_nodes'
               AND indexname = ANY(ARRAY['rag_nodes_embedding', 'rag_nodes_tsv', 'rag_nodes_allowed_groups',
                                         'rag_nodes_allowed_users']) LOOP
        INSERT INTO rag_deferred_indexes VALUES (r.indexname, r.indexdef);
        EXECUTE format('DROP INDEX %I', r.indexname);
    END LOOP;
    ALTER TABLE rag_nodes DISABLE TRIGGER rag_bm25_insert;
    ALTER TABLE rag_nodes DISABLE TRIGGER rag_bm25_delete;
END
$fn$;

CREATE FUNCTION rag_restore_index_maintenance() RETURNS void LANGUAGE plpgsql SECURITY DEFINER AS $fn$
DECLARE
    r record;
BEGIN
    PERFORM rag_require_service();
    PERFORM set_config('maintenance_work_mem', '512MB', true);  -- the HNSW graph is built in memory
    FOR r IN DELETE FROM rag_deferred_indexes RETURNING indexdef LOOP
        EXECUTE r.indexdef;
    END LOOP;
    ALTER TABLE rag_nodes ENABLE TRIGGER rag_bm25_insert;
    ALTER TABLE rag_nodes ENABLE TRIGGER rag_bm25_delete;
    PERFORM rag_bm25_rebuild();
END
$fn$;

DO $fns$
BEGIN
    EXECUTE format('ALTER FUNCTION rag_require_service() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION rag_suspend_index_maintenance() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION rag_restore_index_maintenance() SET search_path = %I, pg_temp', current_schema());
END
$fns$;
REVOKE EXECUTE ON FUNCTION rag_suspend_index_maintenance(), rag_restore_index_maintenance() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rag_suspend_index_maintenance(), rag_restore_index_maintenance() TO enterprise_rag_writer;
