"""The layering the folders promise: adapters -> bot -> memory, inside bot/ the order of its parts
(BOT_ORDER), and no import circles.

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
# The composition root and the CLI's run/chat command build the concrete adapters: the only
# upward arrows allowed.
COMPOSITION = {"bot.app", "bot.cli.run"}
# bot/'s parts, lowest first: a module may import its own part, its rank's and the ranks below.
# A part is a package (every module under it) or a module at the top of bot/.
BOT_ORDER: tuple[tuple[str, ...], ...] = (
    ("bot", "bot.message", "bot.channel", "bot.errors", "bot.observe"),   # the port adapters implement, the observer seam
    ("bot.settings", "bot.config", "bot.environment", "bot.logs", "bot.usage", "bot.job_views", "bot.scheduler", "bot.model_servers",
     "bot.model_clients"),  # shared by all
    ("bot.access",),      # who may talk, and which spaces they reach
    ("bot.delivery",),    # inbox, outbox, cluster ownership
    ("bot.reminders",),   # reminders: the WHEN parser, their store, their delivery through the outbox
    ("bot.media",),       # attachments read for the turn: transcripts, image parts, document text
    ("bot.turn",),        # gateway, queues, agent, tools, sessions, commands, views
    ("bot.operator",),    # the operator's work; its line to a running gateway is the admin API client
    ("bot.mcp",),         # the memory tools other agents call over MCP (served by the API and `memgate mcp`)
    ("bot.api",),         # the HTTP API, served by the running gateway
    ("bot.app",),         # the composition root
    ("bot.cli",),         # the command line: builds the app for run/chat, else goes through bot.operator
)
# What adapters may use of bot/: the port only.
PORT = {"bot", "bot.channel", "bot.message", "bot.errors"}
# The operator's side gets a running gateway through the admin API client only, and its own
# gateway (run, chat) from the composition root: never the turn, delivery or the API directly.
OPERATOR_SIDE = ("bot.cli", "bot.operator")
NOT_FOR_THE_OPERATOR_SIDE = ("bot.turn", "bot.delivery", "bot.api")


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


def bot_part(module: str) -> str | None:
    """The BOT_ORDER part a bot module belongs to (the longest matching name), or None."""
    found = [name for rank in BOT_ORDER for name in rank if module == name or module.startswith(name + ".")]
    return max(found, key=len) if found else None


def bot_rank(module: str) -> int | None:
    part = bot_part(module)
    return next((i for i, rank in enumerate(BOT_ORDER) if part in rank), None)


def bot_back_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Arrows inside bot/ that point to a higher part than their own."""
    bad = []
    for source, targets in sorted(graph.items()):
        if not source.startswith("bot"):
            continue
        for target in sorted(t for t in targets if t.startswith("bot")):
            if (bot_rank(target) or 0) > (bot_rank(source) or 0):
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
    assert back_arrows({"bot.cli.memory": {"adapters.console"}}) == ["bot.cli.memory -> adapters.console"]


def test_inside_bot_imports_point_down_the_order_of_its_parts():
    assert bot_back_arrows(import_graph()) == []


def test_every_bot_module_has_a_place_in_the_order():
    assert [m for m in all_modules() if m.startswith("bot") and bot_part(m) is None] == []


def test_the_order_checker_sees_an_upward_arrow_inside_bot():
    graph = {"bot.turn.commands": {"bot.cli.keys", "bot.access.policy"}, "bot.access.policy": {"bot.turn.gateway"},
             "bot.cli.keys": {"bot.turn.commands"}, "bot.config": {"bot.errors"}}
    assert bot_back_arrows(graph) == ["bot.access.policy -> bot.turn.gateway", "bot.turn.commands -> bot.cli.keys"]
    assert bot_part("bot.turn.views.pulse") == "bot.turn" and bot_part("bot") == "bot"


def test_adapters_use_only_the_port_of_bot():
    graph = import_graph()
    wider = [f"{source} -> {target}" for source, targets in sorted(graph.items()) if source.startswith("adapters")
             for target in sorted(targets) if target.startswith("bot") and target not in PORT]
    assert wider == []


def test_the_operator_side_reaches_a_gateway_only_through_the_api_client():
    graph = import_graph()
    direct = [f"{source} -> {target}" for source, targets in sorted(graph.items()) if source.startswith(OPERATOR_SIDE)
              for target in sorted(targets) if target.startswith(NOT_FOR_THE_OPERATOR_SIDE)]
    assert direct == []
    # ...and the client is the only way out of the operator's package to a gateway's address.
    assert "bot.operator.gateway_client" in graph["bot.operator.remote"]


def test_every_package_says_what_it_holds_and_may_import():
    for name, path in all_modules().items():
        if path.name != "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert doc and "import" in doc.lower(), f"{name}/__init__.py needs its two-line docstring"


if __name__ == "__main__":
    graph = import_graph()
    print("back-arrows:", *back_arrows(graph) or ["none"], sep="\n  ")
    print("back-arrows inside bot/:", *bot_back_arrows(graph) or ["none"], sep="\n  ")
    print("circles:", *[" <-> ".join(c) for c in cycles(graph)] or ["none"], sep="\n  ")
