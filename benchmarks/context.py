"""What every suite gets: the mode, round counts, a scratch folder and a logger."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import load_average

__all__ = ["Context"]


@dataclass
class Context:
    """Settings shared by the suites.

    Args:
        quick: the smoke mode: fewer and shorter rounds, in-process suites only.
        rounds: timed rounds per comparison, or `None` for each suite's default
            (at least 7; 2 in quick mode).
        workdir: scratch folder for run directories and data files.
        verbose: print progress to stderr.
    """

    quick: bool
    rounds: int | None
    workdir: Path
    verbose: bool = True

    def rounds_for(self, default: int) -> int:
        """The round count for a comparison whose full-mode default is `default`."""
        if self.rounds is not None:
            return self.rounds
        return 2 if self.quick else default

    def scale(self, full: int, quick: int) -> int:
        """A size (steps, epochs) in full mode or in quick mode."""
        return quick if self.quick else full

    def log(self, message: str) -> None:
        if self.verbose:
            load = ", ".join(f"{x:g}" for x in load_average())
            print(
                f"[bench {time.strftime('%H:%M:%S')} load {load}] {message}",
                file=sys.stderr,
                flush=True,
            )
