"""docs/architecture.md matches the code: every module it names exists, the layers hold.

Every module of `kdist` has a layer (`LAYERS`, lowest first; a module takes the row of
the longest dotted prefix that names it). A module may import its own layer and those
below, never one above, and no set of modules may import one another in a loop. Imports
are read with `ast`, so one inside a function (the usual way to hide a loop) counts.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from kdist.compat.moved import new_name

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "architecture.md"

# The layer table of docs/architecture.md, lowest first. A row names packages, or a
# module of a package that sits lower or higher than the rest of it.
LAYERS: tuple[tuple[str, ...], ...] = (
    # 0. no kdist imports: compatibility, exit statuses, quiet logs, the configs' files
    (
        "kdist.compat",
        "kdist.conf",
        "kdist.process.exit_codes",
        "kdist.process.log_level",
        "kdist.process.quiet",
        "kdist.process",
    ),
    # 1. the config: schemas, checks, objective, trust (no TensorFlow)
    ("kdist.config",),
    # 2. what a run stands on: process set-up, the cluster, the run folder's files
    ("kdist.process.runtime", "kdist.cluster", "kdist.runs", "kdist.run_setup"),
    # 3. building blocks: data, models, strategies, loss/metrics/optimizer builders
    (
        "kdist.data",
        "kdist.models",
        "kdist.strategies",
        "kdist.modeling.compiling",
        "kdist.modeling.lazy_optimizers",
        "kdist.modeling.optimizers",
        "kdist.modeling.schedules",
    ),
    # 4. the engine: runners, controller, checkpoint state
    ("kdist.engine",),
    # 5. callbacks and savers
    ("kdist.callbacks",),
    # 6. (the run assembled: now the job's own package, below)
    ("kdist.modeling",),
    # 7. one training job: the model in scope, batch plan, outputs, inference
    ("kdist.experiment",),
    # 8. built on `Experiment`: the notebook API, tuning, reopening a run, the launcher
    (
        "kdist",
        "kdist.quickfit",
        "kdist.tuning",
        "kdist.evaluation",
        "kdist.launcher",
    ),
    # 9. the commands (`kdist <command>`, `python -m kdist.<command>`)
    (
        "kdist.command",
        "kdist.__main__",
        "kdist.train",
        "kdist.tune",
        "kdist.evaluate",
        "kdist.predict",
        "kdist.launch",
        "kdist.server",
        "kdist.docs",
        "kdist.pages",
        "kdist.doctor",
    ),
)


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every `.py` under the package folder `root`."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of `modules` that `name` imports anywhere in its file (functions too)."""
    package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                keep = len(name.split(".")) - node.level + (1 if package else 0)
                base = ".".join([*name.split(".")[:keep], *([base] if base else [])])
            # `from kdist import experiment` imports a module; `from kdist import fit`, the package.
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        else:
            continue
        for imported in names:
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                found.add(imported)
    return found


def layer_of(name: str, layers: Sequence[Sequence[str]]) -> int | None:
    """The row of the longest prefix in `layers` that names `name` (or `None`)."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, row in enumerate(layers):
        for prefix in row:
            names_it = name == prefix or name.startswith(f"{prefix}.")
            if names_it and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    loops.append(sorted(component))
    return loops


def layer_problems(root: Path, layers: Sequence[Sequence[str]]) -> list[str]:
    """Everything wrong with the imports of the package at `root` against `layers`.

    Returns:
        One line per module without a layer, per import of a higher layer and per loop.
    """
    modules = module_files(root)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    problems = []
    for name in sorted(modules):
        if layer_of(name, layers) is None:
            problems.append(f"{name} has no layer: add it to LAYERS (and docs/architecture.md)")
    for name, imported in sorted(graph.items()):
        own = layer_of(name, layers)
        for other in sorted(imported):
            theirs = layer_of(other, layers)
            if own is not None and theirs is not None and theirs > own:
                problems.append(f"{name} (layer {own}) imports {other} (layer {theirs})")
    for loop in _loops(graph):
        problems.append(f"import loop: {' <-> '.join(loop)}")
    return problems


def _named_modules() -> set[str]:
    return set(re.findall(r"`(?:python -m )?(kdist(?:\.[a-z_]+)*)", PAGE.read_text()))


def _exists(module: str) -> bool:
    module = new_name(module)  # the page's table of moved paths names the old ones too
    path = REPO.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_the_page_names_modules():
    names = _named_modules()
    assert len(names) > 30
    assert {"kdist.experiment", "kdist.engine.controller", "kdist.runs.layout"} <= names


@pytest.mark.parametrize("module", sorted(_named_modules()))
def test_every_module_the_page_names_exists(module: str):
    assert _exists(module), f"docs/architecture.md names {module}, which does not exist"


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower_ones():
    problems = layer_problems(REPO / "kdist", LAYERS)
    assert not problems, "\n".join(problems)


def test_the_page_shows_the_layer_table():
    text = PAGE.read_text()
    for row in LAYERS:
        for prefix in row:
            assert f"`{prefix}`" in text, f"docs/architecture.md's layer table lacks {prefix}"


def test_at_most_twelve_modules_at_the_top_of_the_package():
    top = sorted(p.name for p in (REPO / "kdist").glob("*.py"))
    assert len(top) <= 12, top


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path / "pkg"


PLANTED_LAYERS = (("pkg.low",), ("pkg.high", "pkg"))


def test_the_checker_passes_a_clean_tree(tmp_path: Path):
    root = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low.py": "X = 1\n",
            "pkg/high.py": "from pkg.low import X\n",
        },
    )
    assert layer_problems(root, PLANTED_LAYERS) == []


def test_the_checker_fails_on_a_planted_upward_import_inside_a_function(tmp_path: Path):
    root = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low.py": "def f():\n    from pkg import high\n    return high\n",
            "pkg/high.py": "from . import low\n",
            "pkg/stray.py": "",
        },
    )
    problems = layer_problems(root, PLANTED_LAYERS)
    assert "pkg.low (layer 0) imports pkg.high (layer 1)" in problems
    assert "import loop: pkg.high <-> pkg.low" in problems
    # `pkg.stray` falls under the row of `pkg` (the longest prefix that names it).
    assert not any("has no layer" in p for p in problems)
    assert layer_problems(root, (("pkg.low",), ("pkg.high",))) == [
        "pkg has no layer: add it to LAYERS (and docs/architecture.md)",
        "pkg.stray has no layer: add it to LAYERS (and docs/architecture.md)",
        "pkg.low (layer 0) imports pkg.high (layer 1)",
        "import loop: pkg.high <-> pkg.low",
    ]


def test_the_checker_finds_a_loop_within_one_layer(tmp_path: Path):
    root = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/high.py": "import pkg.other\n",
            "pkg/other.py": "def f():\n    import pkg.high\n",
            "pkg/low.py": "",
        },
    )
    assert layer_problems(root, PLANTED_LAYERS) == ["import loop: pkg.high <-> pkg.other"]
