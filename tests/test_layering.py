"""One-way layering and no import circles, read from the source with ``ast`` (nothing is imported).

The core (``groundlens_core/``) sits below ``trace/`` and ``plugins/``: it imports neither, at module
level, inside a function or by a module name given to ``importlib``. The one exception is the public
``groundlens_core.providers`` facade, which re-exports the provider adapters. What the trace package
adds to the core (the ``report`` command, the ``evaluate --html`` writer) reaches it through entry
points (groundlens_core/extensions.py). ``trace/`` imports no plugin, and only ``plugins/`` imports
a framework or an LLM SDK. What adapters share that knows no framework is the adapter kit
(``plugins/kit/``); the readers the ``traces`` command shares with the live path (a prompt's
context, chat messages) live in ``trace/recorder/``.

The shape a maintainer reads is kept too: folders hold few modules each (subpackages group what
belongs together) and no function is longer than a screen.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
#: source folder -> the package it installs as (pyproject.toml's package-dir)
PACKAGES = {
    "groundlens_core": "groundlens_core",
    "trace": "groundlens_core.trace",
    "plugins": "groundlens_core.plugins",
}
UPPER = ("groundlens_core.trace", "groundlens_core.plugins")
FACADE = "groundlens_core.providers"
#: the frameworks and SDKs the adapters translate: imported by plugins/ only
FRAMEWORKS = (
    "langchain",
    "langchain_core",
    "langgraph",
    "crewai",
    "autogen_agentchat",
    "autogen_core",
    "autogen_ext",
    "semantic_kernel",
    "openai",
    "anthropic",
    "google.genai",
    # the review tools the score sinks write to, and the instrumentors whose spans adapters look up
    "phoenix",
    "langfuse",
    "langsmith",
    "openinference",
)


class Edge(NamedTuple):
    source: str
    target: str
    line: int
    deferred: bool  # inside a function: runs when called, not when the module is imported


def product_modules() -> dict[str, Path]:
    mods = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join([package, *parts])] = path
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[tuple[ast.AST, bool]]:
    """Every import statement and ``importlib`` call with whether it is deferred; ``if TYPE_CHECKING:``
    blocks never run and are left out."""

    def walk(node: ast.AST, deferred: bool) -> Iterator[tuple[ast.AST, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), deferred)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom, ast.Call)):
                yield child, deferred
            inner = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from walk(child, inner)

    yield from walk(tree, False)


def _dynamic_target(call: ast.Call, loaders: tuple[str, ...] = ("import_module", "__import__")) -> str | None:
    """The module named by ``importlib.import_module("…")`` or ``__import__("…")`` (or another of
    ``loaders``), if a constant."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in loaders or not call.args:
        return None
    arg = call.args[0]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def import_edges() -> list[Edge]:
    mods = product_modules()
    edges = []
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, deferred in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parent + ([node.module] if node.module else []))
                # ``from P import m`` depends on the module P.m when there is one, else on P
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                dynamic = _dynamic_target(node)  # type: ignore[arg-type]
                targets = [dynamic] if dynamic else []
            for target in targets:
                edge = Edge(name, target, node.lineno, deferred)
                if target != name and (target in mods or target.startswith(UPPER)) and edge not in edges:
                    edges.append(edge)
    return edges


def framework_imports() -> list[tuple[str, str, int]]:
    """``(module, framework, line)`` for every import of a framework or SDK, including the lazy
    ones (``require("crewai", ...)``, ``optional_base("crewai", ...)``)."""
    found = []
    for name, path in product_modules().items():
        for node, _ in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                # ``from google import genai`` imports the SDK ``google.genai``: a name may be a module
                base = "" if node.level else node.module or ""
                inner = [f"{base}.{a.name}" for a in node.names]
                targets = [] if not base else [base] if any(_in(base, f) for f in FRAMEWORKS) else inner
            else:
                dynamic = _dynamic_target(node, ("import_module", "__import__", "require", "optional_base"))  # type: ignore[arg-type]
                targets = [dynamic] if dynamic else []
            found += [(name, t, node.lineno) for t in targets if any(_in(t, f) for f in FRAMEWORKS)]
    return found


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _is_core(module: str) -> bool:
    return not any(_in(module, p) for p in (*UPPER, FACADE))


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The import circles (strongly connected components of more than one module), Tarjan's algorithm."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _show(edges: list[Edge]) -> str:
    return "\n".join(
        f"  {e.source} -> {e.target} (line {e.line}{', in a function' if e.deferred else ''})" for e in edges
    )


def test_the_scan_sees_the_package():
    mods = product_modules()
    assert {"groundlens_core.scoring", "groundlens_core.trace.model", "groundlens_core.plugins.langgraph"} <= set(mods)
    edges = import_edges()
    # a module-level import, a deferred one and a relative one are all seen
    assert any(e.source == "groundlens_core.trace.html" and e.target == "groundlens_core.trace.model" for e in edges)
    assert any(e.source == "groundlens_core.cli" and e.deferred for e in edges)
    assert any(
        e.source == "groundlens_core.providers.openai" and _in(e.target, "groundlens_core.plugins") for e in edges
    )
    # and the circle finder finds a circle
    a, b, c = "groundlens_core.a", "groundlens_core.b", "groundlens_core.c"
    assert cycles([Edge(a, b, 1, False), Edge(b, c, 1, True), Edge(c, a, 1, False), Edge(a, "x", 1, False)]) == [
        [a, b, c]
    ]


def test_the_core_imports_nothing_from_trace_or_plugins():
    upward = [e for e in import_edges() if _is_core(e.source) and e.target.startswith(UPPER)]
    assert not upward, "the core imports trace/ or plugins/ (register an entry point instead):\n" + _show(upward)


def test_trace_imports_nothing_from_plugins():
    upward = [
        e for e in import_edges() if _in(e.source, "groundlens_core.trace") and _in(e.target, "groundlens_core.plugins")
    ]
    assert not upward, "trace/ imports plugins/:\n" + _show(upward)


def test_only_plugins_import_a_framework_or_sdk():
    found = framework_imports()
    # the scan sees the adapters' imports, eager and lazy
    seen = {t.partition(".")[0] for m, t, _ in found if _in(m, "groundlens_core.plugins")}
    assert {"autogen_core", "crewai", "langchain_core", "semantic_kernel"} <= seen, seen
    outside = [(m, t, line) for m, t, line in found if not _in(m, "groundlens_core.plugins")]
    assert not outside, "a framework or SDK imported outside plugins/: " + ", ".join(
        f"{m} imports {t} (line {line})" for m, t, line in outside
    )


def test_no_import_circles_among_product_modules():
    module_level = [e for e in import_edges() if not e.deferred]
    assert not cycles(module_level), cycles(module_level)


def test_no_import_circles_even_through_imports_in_functions():
    found = cycles(import_edges())
    assert not found, "\n".join(
        f"circle {c}:\n" + _show([e for e in import_edges() if e.source in c and e.target in c]) for c in found
    )


#: the most modules directly in each source folder: more, and the folder needs a subpackage
MOST_MODULES = {"groundlens_core": 15, "plugins": 8, "trace": 10}
#: the longest a function may be, in lines (its decorators aside)
LONGEST_FUNCTION = 80


def test_each_folder_holds_few_modules():
    crowded = {
        folder: sorted(p.name for p in (ROOT / folder).glob("*.py"))
        for folder, most in MOST_MODULES.items()
        if len(list((ROOT / folder).glob("*.py"))) > most
    }
    assert not crowded, f"more modules than {MOST_MODULES} allows directly in a folder: {crowded}"


def test_no_function_is_longer_than_a_screen():
    long = []
    for name, path in product_modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LONGEST_FUNCTION:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert not long, f"functions over {LONGEST_FUNCTION} lines (split them into helpers named for what they do): {long}"


def test_no_import_circles_in_the_core_even_through_imports_in_functions():
    core = [e for e in import_edges() if _is_core(e.source) and _is_core(e.target)]
    found = cycles(core)
    assert not found, "\n".join(
        f"circle {c}:\n" + _show([e for e in core if e.source in c and e.target in c]) for c in found
    )
