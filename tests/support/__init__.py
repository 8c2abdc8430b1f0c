"""Helpers shared by tests: databases, scripted LLM replies, HTTP guards, scenario matching."""
