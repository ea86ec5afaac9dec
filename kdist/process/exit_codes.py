"""The exit statuses of `python -m kdist.train`, in one place.

`kdist.launch --max-restarts` and cluster managers read them; the README's table of
exit statuses is checked against `EXIT_CODES` by a test.
"""

from __future__ import annotations

__all__ = [
    "EXIT_CHECKPOINT",
    "EXIT_CODES",
    "EXIT_CONFIG_ERROR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NON_FINITE",
    "EXIT_OK",
    "EXIT_PS_UNAVAILABLE",
    "EXIT_RESTART",
    "EXIT_WRITE_FAILED",
]

EXIT_OK = 0
# An unexpected error (a Python traceback): a bug in kdist or in user code.
EXIT_FAILED = 1
# Bad input: a config key, a data file, a run folder; one line names it and what is valid.
EXIT_CONFIG_ERROR = 2
# The training loss (or the weights at a save) became NaN or infinite.
EXIT_NON_FINITE = 3
# A folder of checkpoints exists but none of them reads.
EXIT_CHECKPOINT = 4
# A parameter server is unreachable (parameter_server strategy).
EXIT_PS_UNAVAILABLE = 5
# A file of the run could not be written (a full disk, a read-only folder); the
# backups written before are intact and no half-written one is left.
EXIT_WRITE_FAILED = 6
# SIGTERM: a backup was saved, restart me (`kdist.launch --max-restarts`).
EXIT_RESTART = 42
# Ctrl-C (SIGINT): a backup was saved; re-run the same command to resume (128 + SIGINT).
EXIT_INTERRUPTED = 130

# What each status means, as the README's table says it.
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "done",
    EXIT_FAILED: "unexpected error (traceback)",
    EXIT_CONFIG_ERROR: "bad config, data or run folder",
    EXIT_NON_FINITE: "non-finite loss or weights",
    EXIT_CHECKPOINT: "unreadable checkpoints",
    EXIT_PS_UNAVAILABLE: "a parameter server unreachable",
    EXIT_WRITE_FAILED: "a file could not be written (disk full)",
    EXIT_RESTART: "saved on SIGTERM, restart me",
    EXIT_INTERRUPTED: "saved on Ctrl-C",
}
