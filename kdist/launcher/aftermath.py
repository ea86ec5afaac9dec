"""A failed trainer's aftermath, said in one line per task instead of their tracebacks.

When a trainer of a multi-worker run fails (killed, Ctrl-C, an error), the others react to
the lost peer: some 200 lines of `UnavailableError` tracebacks from TensorFlow's gRPC
runtime, before the launcher has even stopped them. Those lines are kept out of the
launch's output (still in each task's `tail`) and counted; once every task is stopped,
`say_hidden` says one line per task.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable

from kdist.launcher.tasks import Task
from kdist.process.exit_codes import EXIT_RESTART

__all__ = ["after_a_trainer_failed", "say_hidden"]

# A line that may be a task's reaction to a lost peer (a traceback, a gRPC error).
_ALARM = re.compile(r"Traceback|Error|Exception|UNAVAILABLE|^[EF]\d{4} ")
# How long such a line waits for a peer's failure to show before it is printed: a
# survivor reports the lost connection within milliseconds of its peer's death, before
# the peer's exit can be seen. Once per `_CLEAR_SECONDS` a task: a task's own
# traceback is not slowed line by line.
_ALARM_WAIT_SECONDS = 1.0
_CLEAR_SECONDS = 10.0


def _exit_code(process: subprocess.Popen) -> int | None:
    """`process`'s exit code (negative for a signal) once it has exited, else `None`;
    without reaping it (`WNOWAIT`), so that any thread may ask while another waits."""
    if process.returncode is not None:
        return int(process.returncode)
    try:
        found = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return process.poll()
    if found is None:
        return None
    return found.si_status if found.si_code == os.CLD_EXITED else -found.si_status


def failed_trainer(tasks: list[Task], but: Task | None = None) -> Task | None:
    """A trainer other than `but` that has exited with a failure (not 0, not 42)."""
    for task in tasks:
        if task is not but and task.trains and task.process is not None:
            code = _exit_code(task.process)
            if code is not None and code not in (0, EXIT_RESTART):
                return task
    return None


def after_a_trainer_failed(tasks: list[Task]) -> Callable[[Task, str], bool]:
    """For `kdist.launcher.tasks.start`'s `quiet`: whether a task's line is kept out of
    the output, because another trainer of the start has failed.

    Args:
        tasks: the tasks of one start.

    Returns:
        `quiet(task, line)`.
    """
    cleared: dict[str, float] = {}

    def quiet(task: Task, line: str) -> bool:
        if failed_trainer(tasks, but=task) is not None:
            return True
        now = time.monotonic()
        if not _ALARM.search(line) or cleared.get(task.name, 0.0) > now:
            return False
        while time.monotonic() < now + _ALARM_WAIT_SECONDS:
            time.sleep(0.05)
            if failed_trainer(tasks, but=task) is not None:
                return True
        cleared[task.name] = time.monotonic() + _CLEAR_SECONDS
        return False

    return quiet


def say_hidden(tasks: list[Task], say: Callable[[str], None]) -> None:
    """One line per task whose output was kept out: how many lines, after what."""
    failed = failed_trainer(tasks)
    for task in tasks:
        if task.hidden:
            after = (
                f" after {failed.name} failed" if failed is not None and failed is not task else ""
            )
            say(f"{task.name} stopped; {task.hidden} line(s) of its output{after} not shown")
