"""Checks on candidates and answers: relevance grading, the decision, draft verification, support."""
