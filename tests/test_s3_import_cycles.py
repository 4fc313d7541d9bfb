"""The object-store modules import each other without a cycle (every import counts: module-level,
inside a function, and type-only under ``TYPE_CHECKING``)."""

from __future__ import annotations

import ast
from pathlib import Path

import intentlog.s3

S3 = Path(intentlog.s3.__file__).parent


def imports_of(path: Path) -> set[str]:
    """The ``intentlog.s3`` modules ``path`` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("intentlog.s3."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names if a.name.startswith("intentlog.s3."))
    return found


def test_the_s3_modules_import_each_other_without_a_cycle() -> None:
    graph = {p.stem: imports_of(p) - {p.stem} for p in S3.glob("*.py") if p.stem != "__init__"}
    graph = {m: {d for d in deps if d in graph} for m, deps in graph.items()}
    assert "streams" not in graph["lease"]  # the lease is granted by the streams, and knows them by a protocol
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycle = [*path[path.index(module) :], module]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        for dep in sorted(graph[module]):
            visit(dep, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
