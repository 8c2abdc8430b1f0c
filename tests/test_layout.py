"""The package's layout: SQL only in ``store/``, package imports at module level, no import cycles.

Every SQL statement on the core tables lives in ``enterprise_rag/store/``. SQL travels in string
literals, so those are what is scanned: every string constant of every module outside ``store/``
(f-string pieces joined, placeholders kept as ``{}``), docstrings excepted, since a docstring may
name the table a type mirrors. Benchmarks and tests are outside the package and may keep their own SQL.

A function-level import of an ``enterprise_rag`` module hides a dependency from readers and from
``lint-imports``' layer contracts, and usually papers over a cycle. Heavy optional third-party
packages (onnxruntime, xllamacpp, openai, cohere, tavily, pypdf, bs4) are imported lazily inside the
module that uses them, so the package import can stay at module level.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import grimp

from tests.conftest import REPO

NAME = "enterprise_rag"
PACKAGE = REPO / NAME
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


def _function_level_imports(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for each import of a package module inside a ``def`` or ``async def``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for function in functions:  # a nested function's imports come twice; callers deduplicate
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                if node.level or module == NAME or module.startswith(NAME + "."):
                    yield node.lineno, module
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == NAME or alias.name.startswith(NAME + "."):
                        yield node.lineno, alias.name


def test_package_modules_are_imported_at_module_level() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, module in sorted(set(_function_level_imports(path)))
    ]
    heading = "imports of enterprise_rag modules inside functions (move them to module level):"
    assert not found, "\n".join([heading, *found])


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_no_import_cycles_among_package_modules() -> None:
    """Counts ``if TYPE_CHECKING:`` imports too: a type-only back-reference is still a cycle in the design."""
    spec = importlib.util.find_spec(NAME)
    assert spec is not None and spec.origin == str(PACKAGE / "__init__.py"), "grimp would analyse another checkout"
    graph = grimp.build_graph(NAME, cache_dir=None)
    cycles = _cycles(graph)
    details = [
        f"{' <-> '.join(cycle)}: "
        + ", ".join(
            f"{a} -> {b}" for a in cycle for b in sorted(graph.find_modules_directly_imported_by(a)) if b in cycle
        )
        for cycle in cycles
    ]
    assert not cycles, f"{len(cycles)} import cycle(s):\n" + "\n".join(details)
