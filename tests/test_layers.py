"""The import graph of the house keeps its shape: no circles anywhere (the app, the
project that starts it, the benchmarks), and in the app no import that runs from a lower
layer up to a higher one. The layers are read from the diagram in docs/architecture.md
("The parts, and which way they depend"): the doc is the one statement of them.

Every import counts: those inside functions (an import moved into a function body to
dodge a circle is still a circle), relative ones, and the modules a string loads by its
dotted path (a settings `BACKEND`, `ENGINE`, middleware, URL conf, a registry of parsers).
A package's `__init__` that runs because one of its modules is imported is not counted:
`from reports.parsers import pdf` points at `reports.parsers.pdf` as
`import reports.parsers.pdf` does.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
DIAGRAM_HEADING = "## The parts, and which way they depend"
APP, PROJECT = "reports", "project"
# Everything checked for circles; the app and the project that starts it are layered too.
HOUSE = (APP, PROJECT, "bench")
LAYERED = (APP, PROJECT)
# The parts the diagram must keep apart, by name: a page does not run a report.
WEB, WORKER = "web", "worker"

DOTTED = re.compile(r"^(?:reports|project)(?:\.[A-Za-z_]\w*)+$")
DOWN, BESIDE = ("│", "▼"), "‖"


# -- reading the code --------------------------------------------------------------------


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Return every module of `packages` under `root` by name, empty `__init__`s too."""
    return {
        module_name(root, path): path
        for package in packages
        for path in (root / package).rglob("*.py")
        if "migrations" not in path.parts
    }


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def imported_names(
    tree: ast.AST, module: str, package: bool, known: set[str] | None = None
) -> set[str]:
    """Return what `tree` imports, as absolute dotted names. A name taken from a module is
    that module's submodule when `known` has one, else the module itself; without `known`,
    both."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if package else module.split(".")[:-1]
                if node.level - 1 >= len(anchor):
                    raise ImportError(f"{module}: a relative import above the top package")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                name = f"{base}.{alias.name}"
                if known is None:
                    found.update((base, name))
                else:
                    found.add(name if name in known else base)
    return found


def is_call_to(node: ast.AST, *names: str) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) in names


def dotted_strings(tree: ast.AST) -> tuple[set[str], set[str]]:
    """Return the dotted paths of house modules that `tree` holds as strings: those that
    load a module, and those that only name one: the settings an entry point chooses for
    its process (where the settings are read, not a dependency of its code). A logger's
    name and a system check's id are no paths at all."""
    naming: set[int] = set()
    ignored: set[int] = set()
    for node in ast.walk(tree):
        if is_call_to(node, "getLogger"):
            ignored.update(id(arg) for arg in node.args)
        elif isinstance(node, ast.keyword) and node.arg == "id":
            ignored.add(id(node.value))
        elif is_call_to(node, "setdefault") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and first.value == "DJANGO_SETTINGS_MODULE":
                naming.update(id(arg) for arg in node.args)
    loads, names = set(), set()
    for node in ast.walk(tree):
        text = node.value if isinstance(node, ast.Constant) else None
        if isinstance(text, str) and DOTTED.match(text) and id(node) not in ignored:
            (names if id(node) in naming else loads).add(text)
    return loads, names


def top_level_names(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    body = list(tree.body)
    while body:
        node = body.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            found.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try | ast.With):
            body += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            body += [stmt for handler in getattr(node, "handlers", []) for stmt in handler.body]
    return found


@dataclass(frozen=True)
class House:
    """The modules of a tree of packages and what each one imports or loads by name."""

    files: dict[str, Path]
    imports: dict[str, set[str]]  # by an import statement
    loads: dict[str, set[str]]  # by a string holding a dotted path
    unknown: list[str]  # dotted paths that name nothing in the house

    @property
    def edges(self) -> dict[str, set[str]]:
        return {m: self.imports[m] | self.loads[m] for m in self.imports}


def read_house(root: Path, packages: tuple[str, ...] = HOUSE) -> House:
    files = modules(root, packages)
    known = set(files)
    trees = {name: ast.parse(path.read_text(), str(path)) for name, path in files.items()}
    imports, loads, unknown = {}, {}, []
    for name, tree in trees.items():
        imported = imported_names(tree, name, is_package(files[name]), known)
        imports[name] = (imported & known) - {name}
        loaded, named = dotted_strings(tree)
        loads[name] = set()
        for path in sorted(loaded | named):
            target = loaded_module(path, files, trees)
            if target is None:
                unknown.append(f"{name}: {path!r}")
            elif path in loaded and target != name:
                loads[name].add(target)
    # Empty packages run no code: they stand in the graph only where a string names one.
    nodes = {n for n, p in files.items() if p.read_text().strip()}
    for mapping in (imports, loads):
        for name in list(mapping):
            mapping[name] = {t for t in mapping[name] if t in nodes}
            if name not in nodes:
                del mapping[name]
    return House({n: files[n] for n in nodes}, imports, loads, unknown)


def loaded_module(path: str, files: dict[str, Path], trees: dict[str, ast.Module]):
    """Return the module the dotted `path` loads (a module, or a name defined in one), or
    None when there is no such module or name."""
    module = path
    while module and module not in files:
        module = module.rpartition(".")[0]
    if not module:
        return None
    rest = path[len(module) + 1 :]
    if rest and rest.split(".")[0] not in top_level_names(trees[module]):
        return None
    if not rest and is_package(files[module]) and not files[module].read_text().strip():
        # A package with nothing in its `__init__`: what loads it by name reads a module
        # of it by convention (Django's database ENGINE reads `base`).
        return module + ".base" if module + ".base" in files else module
    return module


# -- reading the diagram -----------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    name: str
    layer: str
    depth: int  # 0 at the top; a module may import its own depth and the depths below
    paths: tuple[str, ...]


def read_diagram(text: str) -> list[Part]:
    """Return the parts the diagram lists, top layer first.

    A row starts at the diagram's left edge with its part's name, then the paths of its
    modules (under reports/ unless they start with project/), continued on indented
    lines. A line of │ or ▼ between two rows puts the next row a layer below; a line of ‖
    puts it beside, in the same layer: parts side by side never import each other.
    """
    section = text.split(DIAGRAM_HEADING, 1)[1].split("\n## ", 1)[0]
    block: list[str] = []  # the first code block: indented lines, up to its first gap
    for line in section.splitlines():
        if line.startswith("    "):
            block.append(line[4:])
        elif block:
            break
    parts: list[Part] = []
    layer, depth, step = "", -1, DOWN
    name, paths = "", []

    def close():
        if name:
            parts.append(Part(name, layer, depth, tuple(paths)))

    for line in block:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith((*DOWN, BESIDE)):
            step = DOWN if stripped.startswith(DOWN) else BESIDE
            continue
        if not line[0].isspace():
            close()
            assert step, f"no │ or ‖ between two rows of the diagram, before {line!r}"
            name, _, rest = line.partition("  ")
            if step == DOWN:
                layer, depth = name, depth + 1
            paths, step = rest.split(), ""
        else:
            assert name, f"the diagram continues a row before naming one: {line!r}"
            paths += stripped.split()
    close()
    return parts


def module_of(path: str) -> str:
    """Return the module prefix a diagram path names."""
    inside = path if path.startswith(PROJECT + "/") else f"{APP}/{path}"
    return inside.removesuffix("/").removesuffix(".py").replace("/", ".")


@dataclass(frozen=True)
class Layers:
    parts: list[Part]

    def part_of(self, module: str) -> Part | None:
        best: tuple[int, Part | None] = (-1, None)
        for part in self.parts:
            for path in part.paths:
                prefix = module_of(path)
                if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[0]:
                    best = (len(prefix), part)
        return best[1]

    def problems(self, house: House) -> list[str]:
        """Return every import that breaks the layering, as `module → target (why)`."""
        found = []
        for module, targets in sorted(house.edges.items()):
            if not module.startswith(LAYERED):
                continue
            part = self.part_of(module)
            if part is None:
                found.append(f"{module} is in no part: list it in the diagram")
                continue
            for target in sorted(targets):
                into = self.part_of(target)
                if into is None:
                    found.append(f"{module} → {target} (outside the layers)")
                elif into.depth < part.depth:
                    found.append(f"{module} → {target} (up, from {part.name} to {into.name})")
                elif into.depth == part.depth and into.name != part.name:
                    found.append(f"{module} → {target} (beside, {part.name} to {into.name})")
        return found


def diagram() -> Layers:
    return Layers(read_diagram(ARCHITECTURE.read_text()))


@functools.cache
def house() -> House:
    return read_house(ROOT)


# -- the checks --------------------------------------------------------------------------


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
        for target in edges.get(node, ()):
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
    """A module's part of the house: its sub-package, or the module at its package's root."""
    return ".".join(module.split(".")[:2])


def parts_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    parts: dict[str, set[str]] = {}
    for module, targets in edges.items():
        parts.setdefault(package_of(module), set()).update(
            package_of(t) for t in targets if package_of(t) != package_of(module)
        )
    return parts


def app_imports_of_the_project(house: House) -> list[str]:
    """Return the app's import statements that reach the project (a settings string naming
    an app module is how the project is meant to reach the app, not the reverse)."""
    return [
        f"{module} → {target}"
        for module, targets in sorted(house.imports.items())
        if module.startswith(APP + ".")
        for target in sorted(targets)
        if target.startswith(PROJECT + ".")
    ]


def reaching(layers: Layers, house: House, source: str, target: str) -> list[str]:
    def named(module: str, name: str) -> bool:
        part = layers.part_of(module)
        return part is not None and part.name == name

    return [
        f"{module} → {t}"
        for module, targets in sorted(house.edges.items())
        if named(module, source)
        for t in sorted(targets)
        if named(t, target)
    ]


def test_no_module_in_the_house_imports_a_module_that_imports_it_back():
    assert cycles(house().edges) == []


def test_no_part_imports_a_part_that_imports_it_back():
    assert cycles(parts_graph(house().edges)) == []


def test_every_import_points_down_its_own_part_or_nowhere_beside():
    assert diagram().problems(house()) == []


def test_every_module_a_string_loads_exists():
    assert house().unknown == []


def test_the_diagram_lists_each_path_once_and_only_paths_that_exist():
    parts = diagram().parts
    paths = [path for part in parts for path in part.paths]
    assert len(paths) == len(set(paths)), paths
    inside = {p: p if p.startswith(PROJECT + "/") else f"{APP}/{p}" for p in paths}
    assert [p for p, at in inside.items() if not (ROOT / at).exists()] == []
    assert len({part.name for part in parts}) == len(parts)


def test_the_web_and_the_worker_sit_side_by_side_and_never_reach_each_other():
    layers = diagram()
    web, worker = (next(p for p in layers.parts if p.name == n) for n in (WEB, WORKER))
    assert web.depth == worker.depth, "a page does not run a report: keep them side by side"
    assert reaching(layers, house(), WEB, WORKER) == []
    assert reaching(layers, house(), WORKER, WEB) == []


def test_the_models_import_nothing_above_them():
    # The vocabulary they persist sits beside them, below everything else.
    beneath = ("reports.models", "reports.states", "reports.events")
    above = [
        f"{module} → {target}"
        for module, targets in house().edges.items()
        if module.startswith("reports.models")
        for target in targets
        if not target.startswith(beneath)
    ]
    assert above == []
    layers = diagram()
    base = [p for p in layers.parts if p.depth == max(q.depth for q in layers.parts)]
    assert all(layers.part_of(m) in base for m in beneath)


def test_the_app_never_imports_the_project():
    assert app_imports_of_the_project(house()) == []


def test_the_root_holds_role_modules_only():
    package = ROOT / APP
    root = sorted(p.name for p in package.glob("*.py"))
    assert len(root) <= 25, root
    for part in ("models", "worker", "streaming", "observability", "admin"):
        assert (package / part / "__init__.py").is_file()


def test_no_test_module_imports_another_test_module_or_a_conftest():
    tests = ROOT / "tests"
    found = [
        f"{path.relative_to(ROOT)} → {name}"
        for path in tests.rglob("*.py")
        for name in imported_names(
            ast.parse(path.read_text()), module_name(ROOT, path), is_package(path)
        )
        if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith(("test_", "conftest"))
    ]
    assert found == []


# -- the checks can fail: planted trees and diagrams fed to the same functions -----------

PLANTED_DIAGRAM = """\
## The parts, and which way they depend

    top            project/  urls.py
         │
         ▼
    left           api.py
         ‖  beside
    right          worker/
         │
    base           models/  parsers/

Prose after the diagram.
"""


def plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_planted_relative_imports_are_followed_and_a_circle_through_them_is_seen(tmp_path):
    house = read_house(
        plant(
            tmp_path,
            {
                "reports/__init__.py": "",
                "reports/models/__init__.py": "from .tasks import Task\n",
                "reports/models/tasks.py": "def f():\n    from ..worker import run\n",
                "reports/worker/__init__.py": "",
                "reports/worker/run.py": "from ..models import Task\nfrom . import other\n",
                "reports/worker/other.py": "X = 1\n",
            },
        ),
        (APP,),
    )
    assert house.imports == {
        "reports.models": {"reports.models.tasks"},
        "reports.models.tasks": {"reports.worker.run"},
        "reports.worker.run": {"reports.models", "reports.worker.other"},
        "reports.worker.other": set(),
    }
    assert cycles(house.edges) == [["reports.models", "reports.models.tasks", "reports.worker.run"]]


def test_planted_strings_that_load_modules_are_edges_and_a_missing_one_is_reported(tmp_path):
    house = read_house(
        plant(
            tmp_path,
            {
                "project/__init__.py": "",
                "project/settings.py": (
                    "import os\n"
                    'ROOT_URLCONF = "project.urls"\n'
                    'STORAGES = {"r": {"BACKEND": "reports.storage.Store"}}\n'
                    'DATABASES = {"default": {"ENGINE": "project.sqlite"}}\n'
                    'MIDDLEWARE = ["reports.storage.Missing", "reports.gone.Thing"]\n'
                ),
                "project/urls.py": 'import os\nos.environ.setdefault("DJANGO_SETTINGS_MODULE", '
                '"project.settings")\n',
                "project/sqlite/__init__.py": "",
                "project/sqlite/base.py": "class DatabaseWrapper: ...\n",
                "reports/__init__.py": "",
                "reports/storage.py": (
                    'import logging\nlog = logging.getLogger("reports.nowhere")\nclass Store: ...\n'
                ),
                "reports/parsers.py": 'PATHS = {".md": "reports.storage.Store"}\n',
            },
        ),
        LAYERED,
    )
    assert house.loads["project.settings"] == {
        "project.urls",
        "project.sqlite.base",
        "reports.storage",
    }
    assert house.loads["reports.parsers"] == {"reports.storage"}
    assert house.loads["project.urls"] == set()  # choosing the settings is no dependency
    assert house.loads["reports.storage"] == set()  # a logger's name loads nothing
    assert sorted(house.unknown) == [
        "project.settings: 'reports.gone.Thing'",
        "project.settings: 'reports.storage.Missing'",
    ]


def test_a_planted_app_import_of_the_project_is_seen_but_a_settings_string_is_not(tmp_path):
    house = read_house(
        plant(
            tmp_path,
            {
                "project/__init__.py": "",
                "project/settings.py": 'X = "reports.urls"\n',
                "reports/__init__.py": "",
                "reports/urls.py": "from project import settings\n",
                "reports/apps.py": 'NAME = "project.settings.X"\n',
            },
        ),
        LAYERED,
    )
    assert app_imports_of_the_project(house) == ["reports.urls → project.settings"]


def test_a_planted_circle_in_the_benchmarks_is_seen(tmp_path):
    root = plant(
        tmp_path,
        {
            "bench/__init__.py": "",
            "bench/costs.py": "def main():\n    from bench.fanout import run\n",
            "bench/fanout.py": "from bench import costs\n",
        },
    )
    assert cycles(read_house(root, ("bench",)).edges) == [["bench.costs", "bench.fanout"]]


def test_the_planted_diagram_is_read_as_layers_and_parts():
    parts = read_diagram(PLANTED_DIAGRAM)
    assert [(p.name, p.layer, p.depth, p.paths) for p in parts] == [
        ("top", "top", 0, ("project/", "urls.py")),
        ("left", "left", 1, ("api.py",)),
        ("right", "left", 1, ("worker/",)),
        ("base", "base", 2, ("models/", "parsers/")),
    ]


def test_planted_imports_up_beside_and_outside_the_layers_are_seen():
    layers = Layers(read_diagram(PLANTED_DIAGRAM))
    edges = {
        "reports.models.tasks": {"reports.parsers.pdf", "reports.api"},  # sideways, up
        "reports.api": {"reports.worker.run", "reports.models"},  # beside, down
        "reports.worker.run": {"bench.fanout"},  # outside
        "reports.urls": {"project.settings", "reports.api"},  # own part, down
        "project.asgi": {"reports.worker.run"},
        "reports.stray": set(),
    }
    house = House({}, edges, {m: set() for m in edges}, [])
    assert layers.problems(house) == [
        "reports.api → reports.worker.run (beside, left to right)",
        "reports.models.tasks → reports.api (up, from base to left)",
        "reports.stray is in no part: list it in the diagram",
        "reports.worker.run → bench.fanout (outside the layers)",
    ]
    assert reaching(layers, house, "left", "right") == ["reports.api → reports.worker.run"]
