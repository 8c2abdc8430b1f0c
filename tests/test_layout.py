"""Every SQL statement on the core tables lives in ``enterprise_rag/store/``: no other package holds SQL text.

SQL travels in string literals, so those are what is scanned: every string constant of every
module outside ``store/`` (f-string pieces joined, placeholders kept as ``{}``), docstrings
excepted, since a docstring may name the table a type mirrors. Benchmarks and tests are
outside the package and may keep their own SQL.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "enterprise_rag"
STORE = PACKAGE / "store"

SQL = re.compile(
    r"\bSELECT\b.*?\bFROM\b"
    r"|\bSELECT\s+\w+\s*\("
    r"|\bINSERT\s+INTO\b"
    r"|\bUPDATE\s+\w+\s+SET\b"
    r"|\bDELETE\s+FROM\b"
    r"|\b(?:CREATE|ALTER|DROP)\s+(?:TABLE|INDEX|ROLE|EXTENSION|POLICY|TRIGGER|FUNCTION)\b"
    r"|\bCOPY\s+\w+\s*\("
    r"|\bset_config\s*\("
    r"|\brag_(?:documents|nodes|traces|trace_\w+|grade_cache|meta|migrations|bm25_\w+|acl_\w+)\b",
    re.DOTALL,
)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the nodes that are docstrings (first statement of a module, class or function)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _literals(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of every string literal but docstrings; an f-string as one text."""
    skip = _docstrings(tree)
    inside_fstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                inside_fstrings.add(id(value))
                parts.append(value.value if isinstance(value, ast.Constant) else "{}")
            yield node.lineno, "".join(str(p) for p in parts)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and id(node) not in inside_fstrings
        ):
            yield node.lineno, node.value


def sql_outside_store(package: Path = PACKAGE, store: Path = STORE) -> list[str]:
    """``path:line: text`` of each string literal holding SQL in a module of ``package`` outside ``store``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.is_relative_to(store):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, text in sorted(_literals(tree)):
            match = SQL.search(text)
            if match:
                found.append(f"{path.relative_to(package.parent)}:{line}: {match.group(0)[:60]!r}")
    return found


def test_no_sql_outside_the_store() -> None:
    found = sql_outside_store()
    assert not found, "SQL text outside enterprise_rag/store/:\n" + "\n".join(found)


def test_the_scan_finds_sql_in_code_and_not_in_docstrings(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "store").mkdir(parents=True)
    (package / "store" / "ok.py").write_text('Q = "SELECT 1 FROM rag_nodes"\n')
    (package / "prose.py").write_text('"""One row of ``rag_documents``; select what you need from it."""\n')
    (package / "query.py").write_text(
        'def f(conn, t):\n    """Reads rag_nodes."""\n'
        '    return conn.execute(\n        f"SELECT a, b"\n        f" FROM {t}")\n'
    )
    (package / "cache.py").write_text("X = ('INSERT INTO ' 'x VALUES (1)')\nY = 'rag_grade_cache'\n")
    found = [line.split(": ")[0] for line in sql_outside_store(package, package / "store")]
    assert [Path(f).name for f in found] == ["cache.py:1", "cache.py:2", "query.py:4"]
