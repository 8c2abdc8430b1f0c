"""LLM calls (timeouts, retries, token accounting), every prompt, and the marking of untrusted text."""
