"""docs/settings.md against project/settings.py: every variable the settings read from the
environment is named there, every variable its tables name is read, and each plain default
its tables state is the one a server with an empty environment runs with."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ROOT / "project" / "settings.py"
DOCS = ROOT / "docs" / "settings.md"
# Read by libraries, not by project/settings.py: boto3 reads the object store's credentials.
READ_ELSEWHERE = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
# Set for the run that reads the defaults: a key is required, and the data stays out of var/.
SET_HERE = {"DJANGO_SECRET_KEY", "REPORTS_DATA_DIR"}

# Runs project/settings.py one statement at a time, wrapping its env_* helpers as they are
# defined, and prints what each variable it asks for came to with nothing set.
RECORD_DEFAULTS = """
import ast, json, sys
path = sys.argv[1]
tree = ast.parse(open(path).read())
found = {}
def recording(helper):
    def read(name, *args, **kwargs):
        value = helper(name, *args, **kwargs)
        found.setdefault(name, value)
        return value
    return read
namespace = {"__name__": "project.settings", "__file__": path}
for node in tree.body:
    exec(compile(ast.Module([node], []), path, "exec"), namespace)
    if isinstance(node, ast.FunctionDef) and node.name in ("env_str", "env_bool", "env_number"):
        namespace[node.name] = recording(namespace[node.name])
print(json.dumps(found))
"""


def variables_read() -> set[str]:
    """Every name project/settings.py looks up in the environment."""
    names = set()
    for node in ast.walk(ast.parse(SETTINGS.read_text())):
        if isinstance(node, ast.Call) and node.args:
            first = node.args[0]
            function = ast.unparse(node.func)
            helper = isinstance(node.func, ast.Name) and function.startswith("env_")
            reads = helper or function in {"os.environ.get", "usd_micros"}
            if reads and isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
        looked_up = isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ"
        if looked_up and isinstance(node.slice, ast.Constant):
            names.add(node.slice.value)
    return names


def table_rows() -> list[tuple[str, str]]:
    """(variable cell, default cell) of every row of docs/settings.md's variable tables."""
    rows = []
    for line in DOCS.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 3 and not cells[0].startswith("`python"):
            rows.append((cells[0], cells[1]))
    return rows


def defaults_with_nothing_set() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPORTS_", "DJANGO_"))}
    env = {k: v for k, v in env.items() if not k.startswith(("OPENAI_", "AWS_", "APP_"))}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    env["DJANGO_SECRET_KEY"] = "k" * 60  # required
    env["REPORTS_DATA_DIR"] = str(Path(os.environ.get("TMPDIR", "/tmp")) / "settings-defaults")
    found = subprocess.run(
        [sys.executable, "-c", RECORD_DEFAULTS, str(SETTINGS)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0, found.stderr
    return json.loads(found.stdout)


def stated(cell: str):
    """A default as the table writes it, or None when it is prose to be read, not compared."""
    if cell in {"on", "off"}:
        return cell == "on"
    if cell in {"unset", "none"}:
        return ""
    if re.fullmatch(r"`[A-Z][A-Z0-9_]+`", cell):
        return None  # another variable's value
    if re.fullmatch(r"`[^`]*`", cell):
        return cell.strip("`")
    if re.fullmatch(r"\d+(\.\d+)?", cell):
        return float(cell)
    return None


def test_every_variable_the_settings_read_is_documented():
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", DOCS.read_text()))
    assert sorted(variables_read() - documented) == []


def test_every_variable_the_tables_name_is_read():
    read = variables_read()
    named = {
        name
        for variables, _ in table_rows()
        for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", variables)
    }
    assert len(named) > 60
    assert sorted(named - read - READ_ELSEWHERE) == []


def test_each_plain_default_in_the_tables_is_the_codes_own():
    defaults = defaults_with_nothing_set()
    checked = 0
    for variables, default in table_rows():
        names = re.findall(r"`([A-Z][A-Z0-9_]+)`", variables)
        values = [stated(part.strip()) for part in default.split(", ")]
        if len(values) != len(names) or None in values:
            continue  # a default in words ("half of …", "on when debug is off")
        for name, value in zip(names, values, strict=True):
            if name not in defaults or name in SET_HERE:
                continue  # read only in another set-up (PostgreSQL, s3), or set above
            actual = defaults[name]
            if isinstance(value, float) and isinstance(actual, str):
                actual = float(actual)  # REPORTS_DEFAULT_BUDGET_USD is read as text
            assert actual == value, f"{name}: the code's default is {actual!r}, not {default}"
            checked += 1
    assert checked >= 50
