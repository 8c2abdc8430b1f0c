"""The relevance-grade cache (``rag_grade_cache``): grades keyed by question, passage content and model.

A grade is stored as the JSON object the grader wrote (the grader's own fields,
e.g. its probability of yes); the first grade stored for a key stays.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg


def cached_grades(
    conn: psycopg.Connection, question_hash: str, model: str, content_hashes: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """The stored grades of these passages for this question and model, by content hash."""
    rows = conn.execute(
        "SELECT content_hash, grade FROM rag_grade_cache WHERE question_hash = %s AND model = %s"
        " AND content_hash = ANY(%s)",
        (question_hash, model, list(content_hashes)),
    ).fetchall()
    return dict(rows)


def store_grades(
    conn: psycopg.Connection, question_hash: str, model: str, grades: Sequence[tuple[str, dict[str, Any]]]
) -> None:
    """Store ``(content hash, grade)`` pairs for this question and model; keys already cached are kept."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO rag_grade_cache (question_hash, content_hash, model, grade) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT DO NOTHING",
            [(question_hash, content_hash, model, json.dumps(grade)) for content_hash, grade in grades],
        )
