-- Prompt tokens of each LLM call that the server read from its prompt cache instead of evaluating
-- (llama.cpp's cache_n, OpenAI's usage.prompt_tokens_details.cached_tokens): the trace shows
-- whether the calls of one question share their prefix.
ALTER TABLE rag_llm_calls ADD COLUMN cached_tokens integer NOT NULL DEFAULT 0;
