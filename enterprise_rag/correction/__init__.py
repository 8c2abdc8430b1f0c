"""Corrective steps: relevance grading, the proceed / augment / fallback decision, query rewrites."""
