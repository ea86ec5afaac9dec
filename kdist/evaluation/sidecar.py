"""A sidecar evaluator: evaluate every checkpoint a run writes, as it appears.

TensorFlow's `SidecarEvaluator` exists only for tf.keras; this is the Keras 3 one, for
any strategy. It runs in its own process (`python -m kdist.evaluate run_dir=...
watch=true`, or `kdist.launch --evaluator` beside a cluster), on its own device
(one_device by default), so that training never stops to validate: the usual pairing
with parameter servers. Each complete checkpoint of `<run_dir>/checkpoints/` (the ones
the checkpoint state file lists: an asynchronous save is listed only once it is
complete) is restored into a model built from the run's config and evaluated on the
validation split, once. Its metrics go to `<run_dir>/eval.csv` (a row per checkpoint:
the step, the epoch and the metrics) and to TensorBoard under `<run_dir>/tensorboard/eval/`.
The sidecar stops when training has finished (`metrics.json` names the last step and
that checkpoint has been evaluated), or after `timeout` seconds. While the folder has no
config (a mistyped or empty `run_dir`) or no checkpoint it says so at once, and it gives
up (status 2, one line) when none has appeared after `IDLE_SECONDS` (or `timeout`) while
no run holds the folder's lock, or at once when the run has finished without any. One
sidecar per folder: it holds `.eval.lock` while it writes (`kdist.runs.lock`).
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kdist.config.errors import ConfigError
from kdist.runs import lock as run_lock
from kdist.runs.fileio import open_nofollow, read_csv, read_text_limited
from kdist.runs.layout import (
    CHECKPOINTS,
    EVAL,
    EVAL_LOCK,
    METRICS,
    TENSORBOARD,
    linked_entries,
    saved_configs,
)

__all__ = ["IDLE_SECONDS", "watch"]

# How long to wait for a first checkpoint while no run trains in the folder (a sidecar
# started just before its run, as `kdist.launch --evaluator` does, waits for it).
IDLE_SECONDS = 120.0


def _training(run_dir: Path) -> bool:
    """Whether a run holds `run_dir`'s lock (is training there now)."""
    try:
        run_lock.check_free(run_dir)
    except ConfigError:
        return True
    return False


def _complete_checkpoints(folder: Path) -> list[str]:
    import tensorflow as tf

    if not (folder / "checkpoint").is_file():
        return []
    try:
        state = tf.train.get_checkpoint_state(str(folder))
    except (UnicodeDecodeError, ValueError, tf.errors.OpError):
        state = None  # empty or damaged: no complete checkpoint listed (yet)
    if state is None:
        return []
    # The state file may name them relative to another folder: they live in this one.
    return [str(folder / Path(p).name) for p in state.all_model_checkpoint_paths]


def _finished_at(run_dir: Path) -> int | None:
    """The last step of a finished run (from `metrics.json`), or `None` while it trains."""
    path = run_dir / METRICS
    if not path.is_file():
        return None
    try:
        text = read_text_limited(path)  # a planted giant file: one line, not all memory
    except OSError:
        return None
    try:
        return int(json.loads(text)["steps"])
    except (ValueError, KeyError, TypeError):
        return None  # being written


def _wait_for_config(run_dir: Path, deadline: float | None, poll_seconds: float) -> None:
    """Wait for the run's config; say at once what is missing, give up when nothing comes.

    A sidecar may start before its run (`kdist.launch --evaluator`): it waits, saying so
    once, and gives up (one line) at `timeout` or after `IDLE_SECONDS` without a config
    while no run holds the folder's lock: a mistyped `run_dir` ends, it does not hang.
    """
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError("run_dir", "is a file, not a run folder", value=str(run_dir))
    names = saved_configs(run_dir)
    started, announced = time.monotonic(), False
    while not any(p.is_file() for p in names):
        what = "is empty" if run_dir.is_dir() else "does not exist"
        if not announced:
            print(
                f"[sidecar] {run_dir} {what}: no run config ({names[0].relative_to(run_dir)}) "
                f"yet; waiting for a run to start there (giving up after {IDLE_SECONDS:.0f} s "
                "without one)",
                flush=True,
            )
            announced = True
        idle = time.monotonic() - started > IDLE_SECONDS and not _training(run_dir)
        if idle or (deadline is not None and time.monotonic() > deadline):
            waited = time.monotonic() - started
            raise ConfigError(
                "run_dir",
                f"{what}: no run config appeared in {waited:.0f} s and no run trains there",
                value=str(run_dir),
                hint="check the path, or start the training run first",
            )
        time.sleep(poll_seconds)


def watch(
    run_dir: str | os.PathLike[str],
    overrides: Sequence[str] = (),
    *,
    trust_run_dir: bool = False,
    poll_seconds: float = 5.0,
    timeout: float | None = None,
) -> list[dict[str, Any]]:
    """Evaluate each new checkpoint of a run until the run has finished.

    Args:
        run_dir: the run's output folder (it may still be empty: the sidecar waits for
            the run's config).
        overrides: `key=value` or `group=option` changes to the run's config, as for
            `kdist.evaluate`. Multi-worker and parameter-server runs are evaluated with
            `strategy=one_device` unless a strategy is given. Defaults to `()`.
        trust_run_dir: rebuild a config that names code outside kdist and Keras.
            Defaults to `False`.
        poll_seconds: seconds between looks at the checkpoint folder. Defaults to `5.0`.
        timeout: give up after this many seconds. Defaults to `None`: wait for the run.

    Returns:
        One record per evaluated checkpoint: `step`, `epoch` and the validation metrics.

    Raises:
        ConfigError: naming the key or `run_dir`; or `timeout` reached.
    """
    from kdist.evaluation.reopen import in_one_process, load_trusted_config

    if poll_seconds <= 0:
        raise ConfigError("poll_seconds", "must be a positive number", value=poll_seconds)
    folder = Path(run_dir)
    started = time.monotonic()
    deadline = None if timeout is None else started + float(timeout)
    _wait_for_config(folder, deadline, poll_seconds)
    links = linked_entries(folder)
    if links:
        raise ConfigError(
            "run_dir",
            f"holds symbolic links where the sidecar writes ({', '.join(links[:5])}); kdist "
            "does not write through links",
            value=str(folder),
        )
    cfg = load_trusted_config(folder, overrides, trust_run_dir=trust_run_dir)
    in_one_process(cfg, why="sidecar evaluator")
    # One sidecar per folder: two would append the same rows to eval.csv. Its own lock
    # (the training run holds the folder's `.lock` while the sidecar watches it).
    with run_lock.hold(folder, key="run_dir", name=EVAL_LOCK):
        return _evaluate_checkpoints(
            folder, cfg, poll_seconds=poll_seconds, deadline=deadline, timeout=timeout
        )


def _evaluate_checkpoints(
    folder: Path, cfg: Any, *, poll_seconds: float, deadline: float | None, timeout: float | None
) -> list[dict[str, Any]]:
    """The sidecar's loop: each new complete checkpoint evaluated once, until the run ends."""
    import tensorflow as tf

    from kdist.experiment import Experiment

    experiment = Experiment(cfg, run_dir=folder)
    if experiment.source.size("validation") < 1:
        raise ConfigError("data.source", "has no validation examples to evaluate on")
    experiment.build_model()
    controller = experiment.controller
    assert controller is not None
    writer = tf.summary.create_file_writer(str(folder / TENSORBOARD / "eval"))
    steps_per_epoch = experiment.steps_per_epoch
    done: set[str] = set()
    records: list[dict[str, Any]] = []
    # Steps an earlier sidecar of this run evaluated (a restarted launch): not again.
    evaluated = _evaluated_steps(folder / EVAL)
    last_step = max(evaluated, default=-1)
    idle_since, announced = time.monotonic(), False
    while True:
        finished = _finished_at(folder)
        complete = _complete_checkpoints(folder / CHECKPOINTS)
        if not complete and not records:
            _no_checkpoint_yet(folder, finished, idle_since, announced=announced)
            announced = True
        for path in complete:
            if path in done:
                continue
            controller.checkpoint.restore(path).expect_partial()
            step = int(controller.state.steps.numpy())
            done.add(path)
            if step in evaluated:
                continue
            evaluated.add(step)
            metrics = experiment.evaluate()
            record = {"step": step, "epoch": round(step / steps_per_epoch, 4), **metrics}
            _append_row(folder / EVAL, record)
            with writer.as_default():
                for name, value in metrics.items():
                    tf.summary.scalar(f"eval_{name}", value, step=step)
            writer.flush()
            shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
            print(f"[sidecar] step {step}: {shown}", flush=True)
            records.append(record)
            last_step = max(last_step, step)
        if finished is not None and last_step >= finished:
            return records
        if deadline is not None and time.monotonic() > deadline:
            raise ConfigError(
                "timeout",
                f"reached after {len(records)} checkpoint(s); the run has not finished",
                value=timeout,
            )
        time.sleep(poll_seconds)


def _no_checkpoint_yet(
    folder: Path, finished: int | None, idle_since: float, *, announced: bool
) -> None:
    """Say once that there is nothing to evaluate yet; give up when nothing will come."""
    where = folder / CHECKPOINTS
    if finished is not None:
        raise ConfigError(
            "run_dir",
            f"holds a finished run without checkpoints in {where}: nothing to evaluate",
            value=str(folder),
            hint="train with callbacks.checkpoint.enabled=true, or use kdist.evaluate "
            "without watch=true for its model.keras",
        )
    if not announced:
        print(
            f"[sidecar] no checkpoint in {where} yet: waiting for the run (giving up after "
            f"{IDLE_SECONDS:.0f} s if no run trains there)",
            flush=True,
        )
    if not _training(folder) and time.monotonic() - idle_since > IDLE_SECONDS:
        raise ConfigError(
            "run_dir",
            f"has no checkpoint to evaluate and no run training in it (waited "
            f"{IDLE_SECONDS:.0f} s)",
            value=str(folder),
            hint="start the training run, or watch another run_dir",
        )


def _evaluated_steps(path: Path) -> set[int]:
    if not path.is_file():
        return set()
    return {int(float(row["step"])) for row in read_csv(path) if row.get("step")}


def _append_row(path: Path, record: dict[str, Any]) -> None:
    new = not path.is_file()
    with open_nofollow(path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(record))
        if new:
            writer.writeheader()
        writer.writerow(record)
        handle.flush()
        os.fsync(handle.fileno())
