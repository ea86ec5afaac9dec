"""The supervisor of a local cluster: start it, watch it, restart it.

`supervise` is the outer loop of `kdist.launch`: it starts the tasks of one start
(`kdist.launcher.tasks`), watches them until a rule ends the start, then asks the restart
policy (`kdist.launcher.elastic`) whether and with how many workers to start again.

`Watch` holds one rule per task type, deciding what a task's exit means:

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
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from kdist.cluster import remove_scratch
from kdist.launcher.aftermath import after_a_trainer_failed, say_hidden
from kdist.launcher.elastic import Decision, ElasticPolicy
from kdist.launcher.sandbox import Guardian
from kdist.launcher.tasks import (
    INTRA_OP_THREADS,
    Task,
    exit_status,
    plan_tasks,
    port_race,
    signal_group,
    start,
    stop,
    threads_per_worker,
)
from kdist.process.exit_codes import EXIT_INTERRUPTED, EXIT_RESTART
from kdist.runs.layout import SAVE_FOLDERS, clean_leftovers

__all__ = ["PS_LOSS_GRACE_SECONDS", "Launch", "Outcome", "Watch", "supervise"]

_PORT_RETRIES = 3
# How long a sidecar evaluator may take after training ends (its last checkpoints).
_EVALUATOR_GRACE_SECONDS = 600.0
# After a parameter server dies, the chief gets this long to notice and stop with its own
# error (naming the ps) before the launcher stops it.
PS_LOSS_GRACE_SECONDS = 60.0
# Exit status of a launch stopped at its deadline (as `timeout(1)`).
TIMEOUT_STATUS = 124


@dataclass(frozen=True)
class Outcome:
    """How one start ended.

    Attributes:
        status: 0 when every trainer finished, else the failing task's exit code
            (negative for a signal), or `TIMEOUT_STATUS`.
        failed: the task that ended the start, or `None`.
        timed_out: the launch's deadline passed.
        grow: the start was asked to save so that the cluster can grow back (and a
            trainer then exited other than 0).
    """

    status: int
    failed: Task | None = None
    timed_out: bool = False
    grow: bool = False


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
        # After a grow request the start ends for the grow-back, whatever the status: a
        # trainer signalled before it could save (still starting up) exits -15, and the
        # cluster then grows back from the previous backup; no worker slot is to blame.
        return Outcome(code, task, grow=self._grow_requested)

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
        signal_group(trainer.process, signal.SIGTERM)

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


@dataclass
class Launch:
    """What every start of one launch shares."""

    module: str
    overrides: list[str]
    host: str
    ps: int
    run_dir: Path
    base_env: dict[str, str]
    evaluator: bool
    devices_for: Callable[[int], dict[tuple[str, int], str]]
    output: IO[str]
    grace_seconds: float
    restart_grace_seconds: float
    timeout: float | None
    ps_min_workers: int = 1
    # `time.monotonic()` at which the launch gives up, from `timeout`.
    deadline: float | None = field(init=False)
    # Held while a line goes to `output`: the tasks' output threads write there too.
    lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.timeout if self.timeout else None

    def say(self, message: str) -> None:
        """Write one `[launch]` line to `output`."""
        with self.lock:
            self.output.write(f"[launch] {message}\n")
            self.output.flush()


def supervise(launch: Launch, policy: ElasticPolicy, guardian: Guardian) -> int:
    """Start the cluster, watch it, and restart it as `policy` decides; the exit status."""
    say = launch.say
    for folder in SAVE_FOLDERS:
        for leftover in clean_leftovers(launch.run_dir / folder):
            say(f"removed {leftover}, left by an interrupted save")
    port_retries = 0
    shown_devices: dict[tuple[str, int], str] = {}
    while True:
        devices = launch.devices_for(policy.workers)
        if devices and devices != shown_devices:
            shown = ", ".join(f"{role} {i}: [{ids}]" for (role, i), ids in sorted(devices.items()))
            say(f"GPUs (CUDA_VISIBLE_DEVICES) per task: {shown}")
            shown_devices = devices
        outcome = _start_and_watch(launch, policy, guardian, devices)
        if outcome.timed_out:
            return outcome.status
        if outcome.status == 0:
            say("every task finished")
            return 0
        failed = outcome.failed
        assert failed is not None
        status = exit_status(outcome.status)
        say(f"{failed.name} exited with status {status}{_why(outcome.status)}; stopped every task")
        if port_race(failed):
            if port_retries < _PORT_RETRIES:
                port_retries += 1
                say("a port was taken between choosing and binding it; retrying with new ports")
                continue
            say(f"error: a port of {failed.name} stayed in use after {_PORT_RETRIES} retries")
            return 2
        decision = _decide(outcome, failed, policy)
        if decision.message:
            say(decision.message)
        if not decision.restart:
            return exit_status(outcome.status)
        if decision.counted:
            say(f"restart {policy.restarts} of {policy.max_restarts}")


def _decide(outcome: Outcome, failed: Task, policy: ElasticPolicy) -> Decision:
    """What follows a start that `failed` ended: grow back, restart, shrink or stop."""
    if outcome.grow:
        return policy.grow()
    if outcome.status == EXIT_RESTART or not (failed.role == "worker" and failed.trains):
        # Asked to be restarted (nothing failed), or no worker slot to blame.
        return policy.after_failure(worker=None)
    return policy.after_failure(worker=failed.index)


def _start_and_watch(
    launch: Launch,
    policy: ElasticPolicy,
    guardian: Guardian,
    devices: dict[tuple[str, int], str],
) -> Outcome:
    """One start of the cluster with `policy.workers` workers, until a rule ends it."""
    tasks = plan_tasks(
        workers=policy.workers,
        ps=launch.ps,
        module=launch.module,
        overrides=launch.overrides,
        host=launch.host,
        run_dir=launch.run_dir,
        base_env=launch.base_env,
        devices=devices,
        evaluator=launch.evaluator,
    )
    launch.say(f"starting {', '.join(t.name for t in tasks)}; run directory {launch.run_dir}")
    share = threads_per_worker(policy.workers, launch.base_env)
    if share is not None:
        launch.say(
            f"{share} intra-op thread(s) per worker: the cores shared out among the "
            f"workers (set {INTRA_OP_THREADS} to choose)"
        )
    quiet = after_a_trainer_failed(tasks)
    try:
        start(tasks, launch.output, launch.lock, guardian, launch.run_dir, quiet)
        outcome = Watch(
            tasks=tasks,
            say=launch.say,
            min_workers=launch.ps_min_workers,
            deadline=launch.deadline,
            restart_grace_seconds=launch.restart_grace_seconds,
            grow_due=policy.grow_due,
        ).run()
        if outcome.timed_out:
            launch.say(f"timeout after {launch.timeout:g} s; stopping every task")
        return outcome
    finally:
        stop(tasks, launch.grace_seconds)
        say_hidden(tasks, launch.say)
        # A task killed before it could remove its scratch folders leaves them.
        for task in tasks:
            remove_scratch(launch.run_dir, task.role, task.index)
        guardian.clear()


def _why(code: int) -> str:
    """What an exit status says, where it is a signal: ` (SIGKILL)`, ` (Ctrl-C)`."""
    if code == EXIT_INTERRUPTED:
        return " (Ctrl-C)"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f" ({signal.Signals(-code).name})"
    return ""
