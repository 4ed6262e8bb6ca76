"""The layering the folders promise: adapters -> bot -> memory, and no import circles.

Every module's imports are read with `ast` (function-level and TYPE_CHECKING imports count too:
a deferred import still ties two modules together). An edge to a package is to its `__init__`,
unless the imported name is one of its submodules.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("memory", "bot", "adapters")
# Lower number = lower layer; an import may only point to the same or a lower layer.
LAYER = {"memory": 0, "bot": 1, "adapters": 2}
# The composition root and the CLI build the concrete adapters: the only upward arrows allowed.
COMPOSITION = {"bot.app", "bot.cli.run"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def _resolve(base: str, name: str | None, modules: dict[str, Path]) -> str | None:
    target = f"{base}.{name}" if name else base
    if target in modules:
        return target
    if base in modules:
        return base
    return None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules imported by one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    target = _resolve(alias.name, None, modules)
                    if target:
                        found.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                target = _resolve(base, alias.name, modules)
                if target:
                    found.add(target)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def back_arrows(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            up = LAYER[target.split(".")[0]] > LAYER[source.split(".")[0]]
            if up and source not in COMPOSITION:
                bad.append(f"{source} -> {target}")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_imports_point_down_only():
    assert back_arrows(import_graph()) == []


def test_no_import_circles():
    assert cycles(import_graph()) == []


def test_the_checker_sees_a_circle_and_a_back_arrow():
    graph = {"memory.a": {"memory.b"}, "memory.b": {"memory.a", "bot.x"}, "bot.x": set()}
    assert cycles(graph) == [["memory.a", "memory.b"]]
    assert back_arrows(graph) == ["memory.b -> bot.x"]
    assert back_arrows({"bot.app": {"adapters.console"}}) == []


def test_every_package_says_what_it_holds_and_may_import():
    for name, path in all_modules().items():
        if path.name != "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert doc and "import" in doc.lower(), f"{name}/__init__.py needs its two-line docstring"


if __name__ == "__main__":
    graph = import_graph()
    print("back-arrows:", *back_arrows(graph) or ["none"], sep="\n  ")
    print("circles:", *[" <-> ".join(c) for c in cycles(graph)] or ["none"], sep="\n  ")
