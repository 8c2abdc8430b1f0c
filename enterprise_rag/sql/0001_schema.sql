-- Documents, their chunk nodes (a hierarchy), embeddings and full-text vectors.
-- ${EMBED_DIM} and ${TEXT_SEARCH_CONFIG} are replaced by the migrator with the configured
-- embedding size and PostgreSQL text search configuration; both are recorded in rag_meta.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE rag_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE rag_documents (
    document_id    text PRIMARY KEY,
    source         text NOT NULL,
    title          text NOT NULL DEFAULT '',
    version        text,
    status         text NOT NULL DEFAULT 'current',
    effective_date date,
    content_hash   text NOT NULL,
    allowed_groups text[] NOT NULL DEFAULT '{}',
    allowed_users  text[] NOT NULL DEFAULT '{}',
    metadata       jsonb NOT NULL DEFAULT '{}'::jsonb,
    node_count     integer NOT NULL DEFAULT 0,
    ingested_at    timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT rag_documents_acl_present
        CHECK (cardinality(allowed_groups) + cardinality(allowed_users) > 0)
);
CREATE UNIQUE INDEX rag_documents_source ON rag_documents (source);

-- One row per chunk at every level of the hierarchy. Leaves carry an embedding;
-- every node carries the ACL and status of its document (denormalised so the
-- retrieval query filters without a join).
CREATE TABLE rag_nodes (
    node_id        text PRIMARY KEY,
    document_id    text NOT NULL REFERENCES rag_documents (document_id) ON DELETE CASCADE,
    parent_id      text,
    level          smallint NOT NULL,
    is_leaf        boolean NOT NULL,
    position       integer NOT NULL,
    text           text NOT NULL,
    breadcrumb     text NOT NULL DEFAULT '',
    content_hash   text NOT NULL,
    metadata       jsonb NOT NULL DEFAULT '{}'::jsonb,
    embedding      vector(${EMBED_DIM}),
    -- Full-text vector of leaves: breadcrumb (title > headings) weighted A, body B.
    tsv            tsvector GENERATED ALWAYS AS (
        CASE WHEN is_leaf THEN
            setweight(to_tsvector('${TEXT_SEARCH_CONFIG}'::regconfig, breadcrumb), 'A')
            || setweight(to_tsvector('${TEXT_SEARCH_CONFIG}'::regconfig, text), 'B')
        END) STORED,
    allowed_groups text[] NOT NULL,
    allowed_users  text[] NOT NULL,
    status         text NOT NULL DEFAULT 'current',
    CONSTRAINT rag_nodes_acl_present CHECK (cardinality(allowed_groups) + cardinality(allowed_users) > 0)
);
CREATE INDEX rag_nodes_document ON rag_nodes (document_id);
CREATE INDEX rag_nodes_parent ON rag_nodes (parent_id);
CREATE INDEX rag_nodes_content_hash ON rag_nodes (content_hash) WHERE is_leaf;
CREATE INDEX rag_nodes_embedding ON rag_nodes USING hnsw (embedding vector_cosine_ops)
    WITH (m = 16, ef_construction = 64);
CREATE INDEX rag_nodes_tsv ON rag_nodes USING gin (tsv);
CREATE INDEX rag_nodes_allowed_groups ON rag_nodes USING gin (allowed_groups);
CREATE INDEX rag_nodes_allowed_users ON rag_nodes USING gin (allowed_users);
CREATE INDEX rag_documents_allowed_groups ON rag_documents USING gin (allowed_groups);
CREATE INDEX rag_documents_allowed_users ON rag_documents USING gin (allowed_users);

-- OR-combination of tsqueries, so a question's words are searched as alternatives
-- (websearch_to_tsquery alone ANDs them, which rarely matches a natural question).
CREATE AGGREGATE rag_tsquery_or (tsquery) (SFUNC = tsquery_or, STYPE = tsquery);
