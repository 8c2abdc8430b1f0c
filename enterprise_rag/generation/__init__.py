"""Prompts and numbered sources for cited generation and the checks that share its prefix."""
