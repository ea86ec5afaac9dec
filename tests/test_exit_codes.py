"""The manual's table of exit statuses (docs/guides/checkpoints.md) is the one
`kdist/process/exit_codes.py` defines."""

from __future__ import annotations

import ast
import re

from helpers import REPO

from kdist.callbacks.guards import EXIT_NON_FINITE, EXIT_RESTART
from kdist.config.errors import EXIT_CONFIG_ERROR
from kdist.process import exit_codes


def _readme_table() -> dict[int, tuple[str, str]]:
    text = (REPO / "docs" / "guides" / "checkpoints.md").read_text()
    block = text.split("<!-- exit-codes: begin -->")[1].split("<!-- exit-codes: end -->")[0]
    rows = {}
    for line in block.strip().splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows[int(cells[0])] = (cells[1], cells[2])
    return rows


def test_readme_table_matches_the_exit_codes():
    table = _readme_table()
    assert {code: meaning for code, (meaning, _) in table.items()} == exit_codes.EXIT_CODES
    for code, (_, printed) in table.items():
        if code not in (0, 1, 42):  # one line on stderr, starting "kdist:"
            assert printed.startswith("`kdist: "), (code, printed)


def test_every_status_has_one_home():
    assert (EXIT_CONFIG_ERROR, EXIT_NON_FINITE, EXIT_RESTART) == (2, 3, 42)
    names = [
        name for name in exit_codes.__all__ if name.startswith("EXIT_") and name != "EXIT_CODES"
    ]
    values = sorted(getattr(exit_codes, name) for name in names)
    assert values == sorted(exit_codes.EXIT_CODES) == [0, 1, 2, 3, 4, 5, 6, 42, 130]
    interrupted = _readme_table()[exit_codes.EXIT_INTERRUPTED][1]
    source = (REPO / "kdist" / "callbacks" / "guards.py").read_text()
    said = re.sub(r'"\s+"', "", source)  # join the implicitly concatenated string
    assert interrupted.strip("`").removeprefix("kdist: ") in said


_EXIT_CALLS = {"sys.exit", "SystemExit", "os._exit", "exit"}
# Left to the developer who owns kdist/launch.py (issue 16): it is to import EXIT_RESTART.
_NOT_YET_MOVED = {("launch.py", "RESTART_EXIT_CODE")}


def _int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _literal_statuses(source: str) -> list[tuple[str, int]]:
    """`(what, number)` for each exit call, `returncode` comparison or `*EXIT*` constant
    written with a literal number (docstrings and comments do not count)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and node.args and ast.unparse(node.func) in _EXIT_CALLS:
            status = node.args[0]
            # `SystemExit(1 if failed else 0)`: both branches are statuses.
            choices = [status.body, status.orelse] if isinstance(status, ast.IfExp) else [status]
            for choice in choices:
                number = _int(choice)
                if number is not None:
                    found.append((ast.unparse(node), number))
        elif isinstance(node, ast.Compare) and "returncode" in ast.unparse(node.left):
            for right in node.comparators:
                number = _int(right)
                if number is not None:
                    found.append((ast.unparse(node), number))
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            number = _int(node.value)
            for target in targets:
                if isinstance(target, ast.Name) and "EXIT" in target.id and number is not None:
                    found.append((target.id, number))
    return found


def test_no_module_spells_a_status_as_a_number():
    """`kdist/process/exit_codes.py` is the only place that writes 1, 2, 3, 4, 5, 42 or 130."""
    statuses = {code for code in exit_codes.EXIT_CODES if code != exit_codes.EXIT_OK}
    found = []
    for path in sorted((REPO / "kdist").rglob("*.py")):
        if path.name == "exit_codes.py":
            continue
        for what, number in _literal_statuses(path.read_text()):
            if number in statuses and (path.name, what) not in _NOT_YET_MOVED:
                found.append(f"{path.relative_to(REPO)}: {what}")
    assert not found, "use the names in kdist/process/exit_codes.py:\n" + "\n".join(found)


def test_the_literal_scan_finds_literals():
    """The scan above catches what it is meant to (so that test can fail)."""
    code = (
        "import os, sys\n"
        "EXIT_SEARCH_FAILED = 1\n"
        "def f(result):\n"
        '    """Defaults to `sys.exit(42)`."""\n'
        "    if result.returncode == 2:\n"
        "        os._exit(42)\n"
        "    raise SystemExit(EXIT_SEARCH_FAILED)\n"
        "sys.exit(1 if f(None) else 0)\n"
    )
    found = _literal_statuses(code)
    assert sorted(number for _, number in found) == [0, 1, 1, 2, 42]
    assert ("EXIT_SEARCH_FAILED", 1) in found and ("os._exit(42)", 42) in found
