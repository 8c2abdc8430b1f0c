-- Query traces: one row per query, its steps in order, and every LLM call with
-- its prompt and response (so a failed run resumes without re-spending calls).
CREATE TABLE rag_traces (
    trace_id    text PRIMARY KEY,
    user_id     text NOT NULL,
    groups      text[] NOT NULL DEFAULT '{}',
    question    text NOT NULL,
    history     jsonb NOT NULL DEFAULT '[]'::jsonb,
    status      text NOT NULL DEFAULT 'running',
    result      jsonb,
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX rag_traces_user ON rag_traces (user_id, created_at DESC);

CREATE TABLE rag_trace_steps (
    trace_id   text NOT NULL REFERENCES rag_traces (trace_id) ON DELETE CASCADE,
    seq        integer NOT NULL,
    step       text NOT NULL,
    data       jsonb NOT NULL,
    ms         double precision NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (trace_id, seq)
);

CREATE TABLE rag_llm_calls (
    trace_id          text NOT NULL REFERENCES rag_traces (trace_id) ON DELETE CASCADE,
    call_key          text NOT NULL,
    seq               integer NOT NULL,
    name              text NOT NULL,
    role              text NOT NULL,
    model             text NOT NULL,
    messages          jsonb NOT NULL,
    response          text NOT NULL,
    prompt_tokens     integer NOT NULL DEFAULT 0,
    completion_tokens integer NOT NULL DEFAULT 0,
    ms                double precision NOT NULL,
    PRIMARY KEY (trace_id, call_key)
);

-- Relevance grades by (question, chunk content): the same pair is never graded twice.
CREATE TABLE rag_grade_cache (
    question_hash text NOT NULL,
    content_hash  text NOT NULL,
    model         text NOT NULL,
    grade         jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (question_hash, content_hash, model)
);
