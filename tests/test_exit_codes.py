"""The README's table of exit statuses is the one `kdist/exit_codes.py` defines."""

from __future__ import annotations

import re

from helpers import REPO

from kdist import exit_codes
from kdist.callbacks.guards import EXIT_NON_FINITE
from kdist.callbacks.preemption import EXIT_RESTART
from kdist.config.errors import EXIT_CONFIG_ERROR


def _readme_table() -> dict[int, tuple[str, str]]:
    text = (REPO / "README.md").read_text()
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
    assert values == sorted(exit_codes.EXIT_CODES) == [0, 1, 2, 3, 4, 5, 42, 130]
    interrupted = _readme_table()[exit_codes.EXIT_INTERRUPTED][1]
    source = (REPO / "kdist" / "callbacks" / "preemption.py").read_text()
    said = re.sub(r'"\s+"', "", source)  # join the implicitly concatenated string
    assert interrupted.strip("`").removeprefix("kdist: ") in said
