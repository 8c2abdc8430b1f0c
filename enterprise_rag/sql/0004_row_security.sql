-- Row-level security: the second wall behind the ACL predicates in our own SQL.
--
-- Reads made for a user run as the role enterprise_rag_reader (NOLOGIN, no BYPASSRLS), switched
-- to inside the read's transaction (enterprise_rag/store/scoping.py: set_config('role', ...) local
-- to the transaction, which is then rolled back), with the principal in two transaction-local
-- settings, each a text[] bound as a parameter and never pasted into SQL:
--   enterprise_rag.user_id  '{id}' (or '{}' when the id cannot be stored)
--   enterprise_rag.groups   the principal's groups
-- Unset (outside such a transaction) both read as NULL and every policy below yields no row, so
-- a query that forgot its WHERE returns only what the principal may read, or nothing at all.
--
-- Writes (ingest, delete, trace writes) and migrations run as the connecting user, the tables'
-- owner; RLS is enabled but not forced, so the owner is unaffected. The BM25 statistics triggers
-- of 0003 therefore need neither SECURITY DEFINER nor policies: the reader role has no write
-- privilege on rag_nodes, so they only ever run for the owner.
--
-- What the reader role may read without a row filter: rag_bm25_stats (two counts),
-- rag_bm25_terms (lexeme -> document frequency) and rag_bm25_postings (lexeme, leaf sequence
-- number, term counts, length). The search statement needs them corpus-wide (IDF, and BM25
-- over the postings before the ACL check of a broad scope), and a posting filter per row would
-- cost a node lookup per posting. They hold no text, but they do say which stemmed words occur
-- in the corpus and in which leaf: a query that returned postings rows to a user (ours never do)
-- would disclose the words of leaves the user cannot read. rag_acl_leaf_counts (ACL names) is
-- filtered to the principal's own names. rag_grade_cache, rag_meta and rag_migrations are not
-- granted at all.
--
-- The role is cluster-wide; several stores on one server share it (policies and grants are per
-- database). The connecting user must be allowed to switch to it: a superuser always is; any
-- other user is granted membership here (it needs CREATEROLE the first time the role is made).

DO $role$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'enterprise_rag_reader') THEN
        BEGIN
            CREATE ROLE enterprise_rag_reader NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;  -- another store's migration on this server created it a moment ago
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION USING MESSAGE = format(
                    'user %s may not create the query role: have an administrator run "CREATE ROLE '
                    'enterprise_rag_reader NOLOGIN NOBYPASSRLS NOINHERIT; GRANT enterprise_rag_reader TO %I", '
                    'then start again', current_user, current_user);
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'enterprise_rag_reader' AND (rolsuper OR rolbypassrls)) THEN
        RAISE EXCEPTION 'role enterprise_rag_reader is SUPERUSER or BYPASSRLS: row-level security would not bind it';
    END IF;
    IF NOT pg_has_role(current_user, 'enterprise_rag_reader', 'MEMBER') THEN
        BEGIN
            EXECUTE format('GRANT enterprise_rag_reader TO %I', current_user);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION USING MESSAGE = format(
                'user %s may not switch to the query role: have an administrator run '
                '"GRANT enterprise_rag_reader TO %I", then start again', current_user, current_user);
        END;
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO enterprise_rag_reader', current_schema());
END
$role$;

-- The principal of the current transaction (NULL when none is set). Plain SQL functions, inlined
-- by the planner, which folds them to the principal's values when it estimates row counts. (Called
-- through a scalar subquery instead, they would be opaque parameters: the planner then guessed the
-- ACL to be selective and scanned the ACL index instead of HNSW, 15x slower for a broad scope.)
CREATE FUNCTION rag_principal_groups() RETURNS text[] LANGUAGE sql STABLE PARALLEL SAFE
    RETURN nullif(current_setting('enterprise_rag.groups', true), '')::text[];
CREATE FUNCTION rag_principal_user_ids() RETURNS text[] LANGUAGE sql STABLE PARALLEL SAFE
    RETURN nullif(current_setting('enterprise_rag.user_id', true), '')::text[];

GRANT SELECT ON rag_documents, rag_nodes, rag_acl_leaf_counts, rag_bm25_stats, rag_bm25_terms,
    rag_bm25_postings, rag_traces, rag_trace_steps, rag_llm_calls TO enterprise_rag_reader;

ALTER TABLE rag_documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE rag_nodes ENABLE ROW LEVEL SECURITY;
ALTER TABLE rag_acl_leaf_counts ENABLE ROW LEVEL SECURITY;
ALTER TABLE rag_traces ENABLE ROW LEVEL SECURITY;
ALTER TABLE rag_trace_steps ENABLE ROW LEVEL SECURITY;
ALTER TABLE rag_llm_calls ENABLE ROW LEVEL SECURITY;

-- A document or node: its allowed_users names the user (an empty id names no one, as in
-- Principal.users) or its allowed_groups shares a group with the principal.
CREATE POLICY rag_documents_read ON rag_documents FOR SELECT TO enterprise_rag_reader
    USING (allowed_groups && rag_principal_groups()
           OR allowed_users && array_remove(rag_principal_user_ids(), ''));
CREATE POLICY rag_nodes_read ON rag_nodes FOR SELECT TO enterprise_rag_reader
    USING (allowed_groups && rag_principal_groups()
           OR allowed_users && array_remove(rag_principal_user_ids(), ''));
-- The leaf counts of the principal's own ACL names only (the search reads exactly those).
CREATE POLICY rag_acl_leaf_counts_read ON rag_acl_leaf_counts FOR SELECT TO enterprise_rag_reader
    USING ((kind = 'g' AND name = ANY(rag_principal_groups()))
           OR (kind = 'u' AND name = ANY(array_remove(rag_principal_user_ids(), ''))));
-- Traces, their steps and LLM calls: the asking user's own (by exact user id).
CREATE POLICY rag_traces_read ON rag_traces FOR SELECT TO enterprise_rag_reader
    USING (user_id = ANY(rag_principal_user_ids()));
CREATE POLICY rag_trace_steps_read ON rag_trace_steps FOR SELECT TO enterprise_rag_reader
    USING (EXISTS (SELECT 1 FROM rag_traces t WHERE t.trace_id = rag_trace_steps.trace_id
                   AND t.user_id = ANY(rag_principal_user_ids())));
CREATE POLICY rag_llm_calls_read ON rag_llm_calls FOR SELECT TO enterprise_rag_reader
    USING (EXISTS (SELECT 1 FROM rag_traces t WHERE t.trace_id = rag_llm_calls.trace_id
                   AND t.user_id = ANY(rag_principal_user_ids())));
