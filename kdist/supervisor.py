"""The processes of one start of a local cluster, and the rules that end it.

`kdist.launch` plans the tasks (`Task`), `start`s them, and `watch`es them: one rule per
task type decides what a task's exit means, read top to bottom in `Watch`:

- **evaluator** (sidecar): its exit is reported; training goes on without it.
- **ps**: the variables are gone; the chief gets `PS_LOSS_GRACE_SECONDS` to stop with
  its own error (naming the parameter server) before the start ends.
- **worker of a parameter-server run** (a `kdist.server`): the chief reruns its
  functions on the others; the start ends only when fewer than `min_workers` are left.
- **chief, or worker of a multi-worker run** (the trainers): a failure ends the start;
  an exit 42 (saved on SIGTERM) first lets the others finish the same save.

After every pass over the tasks the start also ends when every trainer exited 0, at the
launch's deadline, or when a parameter server was lost and the chief did not stop in time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from kdist.chief import scratch_prefix
from kdist.exit_codes import EXIT_RESTART
from kdist.sandbox import Guardian

__all__ = [
    "PS_LOSS_GRACE_SECONDS",
    "Outcome",
    "Task",
    "Watch",
    "exit_status",
    "port_race",
    "start",
    "stop",
]

_PORT_RACE_MARKERS = ("Address already in use", "Failed to add port", "address in use")
# How long a sidecar evaluator may take after training ends (its last checkpoints).
_EVALUATOR_GRACE_SECONDS = 600.0
# After a parameter server dies, the chief gets this long to notice and stop with its own
# error (naming the ps) before the launcher stops it.
PS_LOSS_GRACE_SECONDS = 60.0
# Exit status of a launch stopped at its deadline (as `timeout(1)`).
TIMEOUT_STATUS = 124


@dataclass
class Task:
    """One process of the cluster: its role, command, environment and output tail."""

    role: str
    index: int
    command: list[str]
    env: dict[str, str]
    trains: bool
    process: subprocess.Popen | None = None
    tail: deque = field(default_factory=lambda: deque(maxlen=40))
    reader: threading.Thread | None = None

    @property
    def name(self) -> str:
        return f"{self.role} {self.index}"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass(frozen=True)
class Outcome:
    """How one start ended.

    Attributes:
        status: 0 when every trainer finished, else the failing task's exit code
            (negative for a signal), or `TIMEOUT_STATUS`.
        failed: the task that ended the start, or `None`.
        timed_out: the launch's deadline passed.
        grow: the start was asked to save so that the cluster can grow back.
    """

    status: int
    failed: Task | None = None
    timed_out: bool = False
    grow: bool = False


def exit_status(code: int) -> int:
    """A process killed by signal N reports -N; shells report 128 + N."""
    return 128 - code if code < 0 else code


def port_race(task: Task) -> bool:
    """Whether `task` failed because a port was taken between choosing and binding it."""
    text = "".join(task.tail)
    return any(marker in text for marker in _PORT_RACE_MARKERS)


def _pump(task: Task, output: IO[str], lock: threading.Lock) -> None:
    assert task.process is not None and task.process.stdout is not None
    for line in task.process.stdout:
        task.tail.append(line)
        with lock:
            output.write(f"[{task.name}] {line}")
            output.flush()


def start(
    tasks: list[Task], output: IO[str], lock: threading.Lock, guardian: Guardian, run_dir: Path
) -> None:
    """Start every task, its output prefixed with its name on `output`."""
    for task in tasks:
        task.tail.clear()
        task.process = subprocess.Popen(
            task.command,
            env=task.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            # Its own process group, so stopping a task also stops anything it started.
            start_new_session=True,
            # Into the private network, and SIGKILL when the launcher dies.
            preexec_fn=guardian.preexec(),
        )
        guardian.watch(task.process.pid, [scratch_prefix(run_dir, task.role, task.index)])
        task.reader = threading.Thread(target=_pump, args=(task, output, lock), daemon=True)
        task.reader.start()
        with lock:
            output.write(f"[launch] {task.name} pid {task.process.pid}\n")
            output.flush()


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def stop(tasks: list[Task], grace_seconds: float) -> None:
    """SIGTERM every running task, then SIGKILL what is left after `grace_seconds`."""
    running = [t.process for t in tasks if t.process is not None and t.process.poll() is None]
    for process in running:
        _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    for process in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for task in tasks:
        if task.process is not None:
            # The group may still hold children even when the leader has exited.
            _signal_group(task.process, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                task.process.wait(timeout=10)
            if task.reader is not None:
                task.reader.join(timeout=5)
            if task.process.stdout is not None and (
                task.reader is None or not task.reader.is_alive()
            ):
                task.process.stdout.close()


class Watch:
    """Poll the tasks of one start until a rule ends it; see the module docstring.

    All arguments are keyword-only.

    Args:
        tasks: the started tasks.
        say: writes one `[launch]` line.
        min_workers: parameter-server runs go on while this many workers are alive.
            Defaults to `1`.
        deadline: `time.monotonic()` at which the launch gives up. Defaults to `None`.
        restart_grace_seconds: after an exit 42, how long the other trainers get to
            finish the same save. Defaults to `60.0`.
        grow_due: called with the seconds this start has run; `True` asks the trainers
            to save (SIGTERM to worker 0) so that the cluster can grow back. Defaults to
            `None`: never.
    """

    def __init__(
        self,
        *,
        tasks: list[Task],
        say: Callable[[str], None],
        min_workers: int = 1,
        deadline: float | None = None,
        restart_grace_seconds: float = 60.0,
        grow_due: Callable[[float], bool] | None = None,
    ):
        self.tasks = tasks
        self.say = say
        self.min_workers = min_workers
        self.deadline = deadline
        self.restart_grace_seconds = restart_grace_seconds
        self.grow_due = grow_due
        self._started = time.monotonic()
        self._ended: set[str] = set()
        self._lost_ps: Task | None = None
        self._ps_deadline = 0.0
        self._grow_requested = False

    def run(self) -> Outcome:
        """Poll every 0.1 s until the start ends; returns how it ended."""
        rules = {
            "evaluator": self._evaluator_exited,
            "ps": self._ps_exited,
            "worker": self._worker_exited,
            "chief": self._trainer_exited,
        }
        while True:
            time.sleep(0.1)
            for task in self.tasks:
                assert task.process is not None
                code = task.process.poll()
                if code is None or task.name in self._ended:
                    continue
                self._ended.add(task.name)
                outcome = rules[task.role](task, code)
                if outcome is not None:
                    return outcome
            outcome = self._run_state()
            if outcome is not None:
                return outcome

    def _evaluator_exited(self, task: Task, code: int) -> Outcome | None:
        # The sidecar ends with the run; its failure costs no training.
        if code != 0:
            self.say(
                f"{task.name} exited with status {exit_status(code)}; training goes on without it"
            )
        return None

    def _ps_exited(self, task: Task, code: int) -> Outcome | None:
        # The variables are gone: give the chief time to report it itself.
        if self._lost_ps is None:
            self._lost_ps = task
            self._ps_deadline = time.monotonic() + PS_LOSS_GRACE_SECONDS
        self.say(
            f"{task.name} exited with status {exit_status(code)}; waiting up "
            f"to {PS_LOSS_GRACE_SECONDS:g} s for the chief to stop"
        )
        return None

    def _worker_exited(self, task: Task, code: int) -> Outcome | None:
        if task.trains:
            return self._trainer_exited(task, code)
        # A parameter-server worker: the chief reruns its functions on the others.
        alive = [t for t in self.tasks if t.role == "worker" and t.running()]
        if alive and len(alive) >= self.min_workers:
            self.say(
                f"{task.name} exited with status {exit_status(code)}; "
                f"training goes on with {len(alive)} worker(s)"
            )
            return None
        if alive:
            self.say(
                f"{task.name} exited with status {exit_status(code)}; {len(alive)} worker(s) "
                f"left, fewer than --min-workers {self.min_workers}"
            )
        else:
            self.say("no worker is left")
        return Outcome(code if code != 0 else 1, task)

    def _trainer_exited(self, task: Task, code: int) -> Outcome | None:
        if code == 0:
            return None  # the others finish on their own
        if code == EXIT_RESTART:
            # The others are saving at the same agreed step: let them finish and exit
            # on their own before anything is stopped.
            self._wait_for_trainers()
        return Outcome(code, task, grow=self._grow_requested and code == EXIT_RESTART)

    def _run_state(self) -> Outcome | None:
        if all(t.process is not None and t.process.poll() == 0 for t in self.tasks if t.trains):
            self._wait_for_evaluator()
            return Outcome(0)
        if self._lost_ps is not None and time.monotonic() > self._ps_deadline:
            assert self._lost_ps.process is not None
            code = self._lost_ps.process.returncode
            return Outcome(code if code else 1, self._lost_ps)
        if self.deadline is not None and time.monotonic() > self.deadline:
            return Outcome(TIMEOUT_STATUS, timed_out=True)
        if (
            not self._grow_requested
            and self.grow_due is not None
            and self.grow_due(time.monotonic() - self._started)
        ):
            self._ask_to_save()
        return None

    def _ask_to_save(self) -> None:
        """SIGTERM to the first trainer: every trainer saves at an agreed step, exits 42."""
        trainer = next((t for t in self.tasks if t.trains and t.running()), None)
        if trainer is None or trainer.process is None:
            return
        self._grow_requested = True
        self.say(f"asking {trainer.name} to save a backup (SIGTERM) to grow the cluster back")
        _signal_group(trainer.process, signal.SIGTERM)

    def _wait_for_trainers(self) -> None:
        deadline = time.monotonic() + self.restart_grace_seconds
        for task in self.tasks:
            if task.process is not None and task.trains:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    task.process.wait(timeout=max(0.0, deadline - time.monotonic()))

    def _wait_for_evaluator(self) -> None:
        """Training is done: let a sidecar evaluator finish its last checkpoints."""
        for task in self.tasks:
            if task.role != "evaluator" or not task.running():
                continue
            assert task.process is not None
            self.say(f"training finished; waiting for {task.name} to evaluate the last checkpoints")
            limit = _EVALUATOR_GRACE_SECONDS
            if self.deadline is not None:
                limit = max(0.0, min(limit, self.deadline - time.monotonic()))
            try:
                task.process.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                self.say(f"{task.name} did not finish within {limit:g} s; stopping it")
