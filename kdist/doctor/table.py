"""The doctor's table: one `Check` per row, and `render` to print it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["STATUSES", "Check", "render"]

# Only `FAIL` makes the doctor's exit status non-zero.
STATUSES = ("ok", "info", "skip", "warn", "FAIL")


@dataclass
class Check:
    """One row of the doctor's table.

    Attributes:
        section: `versions`, `compatibility`, `devices`, `strategies` or `cluster`.
        name: what was checked.
        status: `ok`, `info`, `skip`, `warn` or `FAIL` (only `FAIL` makes the exit
            status non-zero).
        detail: what was found, and for a problem what to do.
    """

    section: str
    name: str
    status: str
    detail: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"`status` ({self.status!r}) must be one of {', '.join(STATUSES)}.")


def render(rows: Sequence[Check], *, color: bool = False) -> str:
    """The rows as a text table with a closing verdict line.

    Args:
        rows: the `Check` rows.
        color: colour the status column with ANSI codes. Defaults to `False`.
    """
    colors = {"ok": "32", "warn": "33", "FAIL": "31;1", "skip": "2", "info": "36"}
    widths = [
        max(len("section"), *(len(r.section) for r in rows)),
        max(len("check"), *(len(r.name) for r in rows)),
        max(len("status"), *(len(s) for s in STATUSES)),
    ]
    header = f"{'section':<{widths[0]}}  {'check':<{widths[1]}}  {'status':<{widths[2]}}  detail"
    lines = [header, "  ".join("-" * w for w in [*widths, 40])]
    previous = None
    for row in rows:
        section = row.section if row.section != previous else ""
        previous = row.section
        status = f"{row.status:<{widths[2]}}"
        if color:
            status = f"\x1b[{colors[row.status]}m{status}\x1b[0m"
        lines.append(f"{section:<{widths[0]}}  {row.name:<{widths[1]}}  {status}  {row.detail}")
    failures = sum(r.status == "FAIL" for r in rows)
    warnings = sum(r.status == "warn" for r in rows)
    verdict = f"{failures} required check(s) failed" if failures else "every required check passed"
    if warnings:
        verdict += f"; {warnings} warning(s)"
    lines += ["", f"kdist doctor: {verdict}"]
    return "\n".join(lines)
