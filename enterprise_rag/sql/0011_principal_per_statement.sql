-- The principal fixed once per statement, from what was signed.
--
-- 0007 checked the signature once per statement (an InitPlan), but the policies compared each row
-- with the live settings: a set_config later in the same statement (in a target list, in a
-- subquery run once per row) changed the principal for the rows read after it, under a signature
-- already checked. Now each policy compares its rows with the signed principal's groups and user
-- ids, read once per statement in an InitPlan together with the signature check: a value is
-- returned only while the settings still carry their signature, and once read it never changes
-- for the statement (an InitPlan without parameters is not evaluated again, also when its
-- subquery is). Whatever a statement changes, its rows are those of the principal that was signed,
-- or none.
--
-- (An array from a subquery is cast, so ANY reads it as one array, not as a subquery's rows.)
-- The planner no longer folds the principal's values into the policy's row estimate; the
-- package's own statements carry their ACL predicates with bound values, which it estimates from.

CREATE FUNCTION rag_signed_groups() RETURNS text[] LANGUAGE sql STABLE PARALLEL RESTRICTED
RETURN CASE WHEN rag_signed('principal') THEN rag_principal_groups() END;
CREATE FUNCTION rag_signed_user_ids() RETURNS text[] LANGUAGE sql STABLE PARALLEL RESTRICTED
RETURN CASE WHEN rag_signed('principal') THEN rag_principal_user_ids() END;

ALTER POLICY rag_documents_read ON rag_documents
    USING (allowed_groups && (SELECT rag_signed_groups())
           OR allowed_users && (SELECT array_remove(rag_signed_user_ids(), '')));
ALTER POLICY rag_nodes_read ON rag_nodes
    USING (allowed_groups && (SELECT rag_signed_groups())
           OR allowed_users && (SELECT array_remove(rag_signed_user_ids(), '')));
ALTER POLICY rag_acl_leaf_counts_read ON rag_acl_leaf_counts
    USING ((kind = 'g' AND name = ANY((SELECT rag_signed_groups())::text[]))
           OR (kind = 'u' AND name = ANY((SELECT array_remove(rag_signed_user_ids(), ''))::text[])));
ALTER POLICY rag_traces_read ON rag_traces
    USING (user_id = ANY((SELECT rag_signed_user_ids())::text[]));
ALTER POLICY rag_trace_steps_read ON rag_trace_steps
    USING (EXISTS (SELECT 1 FROM rag_traces t WHERE t.trace_id = rag_trace_steps.trace_id
                   AND t.user_id = ANY((SELECT rag_signed_user_ids())::text[])));
ALTER POLICY rag_llm_calls_read ON rag_llm_calls
    USING (EXISTS (SELECT 1 FROM rag_traces t WHERE t.trace_id = rag_llm_calls.trace_id
                   AND t.user_id = ANY((SELECT rag_signed_user_ids())::text[])));
