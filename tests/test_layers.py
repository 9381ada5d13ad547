"""The import graph of `reports/` keeps its shape (docs/architecture.md): no circles, and
no import that runs from a lower part up to a higher one.

Every import counts, including those inside functions: an import moved into a function
body to dodge a circle is still a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "reports"

# Lower layers first; a module may import its own layer and the layers below it.
LAYERS = [
    (
        "base",
        [
            "reports.states",
            "reports.events",
            "reports.models",
            "reports.clock",
            "reports.lanes",
            "reports.storage",
            "reports.object_store",
            "reports.validation",
            "reports.rendering",
            "reports.upload_limits",
            "reports.serving.errors",
            "reports.serving.stopping",
            "reports.parsers",
            "reports.providers",
            "reports.observability.logs",
            "reports.observability.version",
            "reports.observability.tracing",
            "reports.observability.otel",
            "reports.observability.percentiles",
            "reports.observability.charts",
            "reports.observability.loop_lag",
        ],
    ),
    (
        "services",
        [
            "reports.wakeups",
            "reports.budgets",
            "reports.observability.task_logs",
            "reports.streaming.broadcast",
            "reports.streaming.follower",
            "reports.streaming.limits",
            "reports.lifecycle",
            "reports.reconciliation",
            "reports.submissions",
            "reports.presentation",
            "reports.auth",
            "reports.login_throttle",
            "reports.checks",
            "reports.observability.latency",
            "reports.observability.waterfall",
            "reports.observability.metrics",
            "reports.observability.middleware",
        ],
    ),
    ("worker", ["reports.worker"]),
    (
        "web",
        [
            "reports.api",
            "reports.views",
            "reports.streaming.consumers",
            "reports.streaming.sse",
            "reports.observability.views",
            "reports.health",
            "reports.submissions.form",
            "reports.admin",
        ],
    ),
    (
        "entry points",
        ["reports.urls", "reports.routing", "reports.apps", "reports.management"],
    ),
]
WEB = dict(LAYERS)["web"]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Return the reports modules `path` imports, anywhere in the file (a name imported
    from a package counts as its submodule when it is one)."""
    return {name for name in imports_of_any(path, submodules=True) if name.startswith("reports.")}


def graph() -> dict[str, set[str]]:
    files = {
        module_name(p): p
        for p in PACKAGE.rglob("*.py")
        if "migrations" not in p.parts and not (p.name == "__init__.py" and not p.read_text())
    }
    return {
        name: {target for target in imports_of(path) if target in files and target != name}
        for name, path in files.items()
    }


def layer_of(module: str) -> int:
    best, index = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, index = len(prefix), i
    assert index is not None, f"{module} belongs to no layer: add it to LAYERS"
    return index


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def package_of(module: str) -> str:
    """A module's package below `reports` (its sub-package, or the module at the root)."""
    return ".".join(module.split(".")[:2])


def test_no_module_imports_a_module_that_imports_it_back():
    assert cycles(graph()) == []


def test_no_part_imports_a_part_that_imports_it_back():
    parts: dict[str, set[str]] = {}
    for module, targets in graph().items():
        parts.setdefault(package_of(module), set()).update(
            package_of(t) for t in targets if package_of(t) != package_of(module)
        )
    for part in list(parts.values()):
        for target in part:
            parts.setdefault(target, set())
    assert cycles(parts) == []


def test_every_import_points_down_or_sideways():
    upward = [
        f"{module} → {target}"
        for module, targets in graph().items()
        for target in targets
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_the_models_import_nothing_above_them():
    # The vocabulary they persist sits beside them, below everything else.
    beneath = ("reports.models", "reports.states", "reports.events")
    above = [
        f"{module} → {target}"
        for module, targets in graph().items()
        if module.startswith("reports.models")
        for target in targets
        if not target.startswith(beneath)
    ]
    assert above == []


def test_web_code_never_imports_the_worker():
    edges = graph()
    reaching = [
        f"{module} → {target}"
        for module, targets in edges.items()
        if layer_of(module) == 3
        for target in targets
        if target.startswith("reports.worker")
    ]
    assert reaching == []


def test_the_root_holds_role_modules_only():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 25, root
    for part in ("models", "worker", "streaming", "observability", "admin"):
        assert (PACKAGE / part / "__init__.py").is_file()


def test_the_checker_sees_a_circle_and_an_upward_import():
    """The checks above would catch what they are for."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert layer_of("reports.models.tasks") < layer_of("reports.worker.pipeline")
    assert layer_of("reports.api") == 3 and "reports.api" in WEB


def test_no_test_module_imports_another_test_module_or_a_conftest():
    tests = ROOT / "tests"
    found = [
        f"{path.relative_to(ROOT)} → {name}"
        for path in tests.rglob("*.py")
        for name in imports_of_any(path)
        if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith(("test_", "conftest"))
    ]
    assert found == []


def imports_of_any(path: Path, *, submodules: bool = False) -> set[str]:
    """Return the modules `path` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if submodules:
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found
