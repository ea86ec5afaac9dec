"""Suite `quality_grid` (issue 53): DiLoCo's outer settings against `every_step`, many seeds.

Run with `python -m benchmarks.quality_grid --out DIR` (`--estimate` prints the plan and
stops; `benchmarks/device_quality.sh` runs it on the lent 16-core machine). Each fit is a
child process of its own (`--one JSON`), pinned to its own cores (`QUALITY_CORES`, default
2) with mirrored over 2 logical CPUs, as `benchmarks.local_sgd`'s quality part, whose jobs
(`QUALITY_JOBS`) it imports; `QUALITY_PARALLEL` children run at once (default
`os.cpu_count() // 2`). The grid (`benchmarks.quality_cells`): `every_step`; `local_sgd` at
`sync_every` 16, 32 and 64; `diloco` at the same periods for each (outer learning rate,
outer momentum) of `CANDIDATES`; `SEEDS` seeds each.

Each fit's row is appended to `DIR/quality.jsonl` as soon as it ends, and `DIR/quality.md`
rewritten: per cell the mean, standard deviation, min and max of the validation accuracy
and the points below `every_step`; per candidate the worst gap over the issue's target
cells (within 1 point at `sync_every` 16, 32 and 64 on both jobs). A rerun skips the cells
already in the file (`--prior FILE` adds an earlier run's rows); `--only PATTERN` (fnmatch
on `job/setting/seed`, repeatable) runs a part of the grid; `--deadline S` starts no fit
that its estimate says would end after S seconds, and stops the last ones soon after.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from benchmarks.quality_cells import SEEDS, cells, markdown

__all__ = ["main", "one", "run_grid"]

# Seconds of one fit in a child pinned to 2 cores, start to end (imports included), taken
# on the 2-core machine under load 2.5 (2026-11-28, one fit each): the estimate until rows
# of this run (or --prior) give medians.
FIT_SECONDS = {"digits": 13.0, "cnn_synthetic": 33.0}
TIMEOUT_FACTOR = 4.0  # a fit's timeout: this times its estimate, and at least MIN_TIMEOUT
MIN_TIMEOUT = 90.0
RESULT = "QUALITY_RESULT "


def one(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one fit in this process (a child of the grid): pinned, mirrored over 2 CPUs."""
    if spec.get("cores"):
        os.sched_setaffinity(0, spec["cores"])  # before TensorFlow sizes its thread pools
    from benchmarks.local_sgd import QUALITY_JOBS, _fit, _setup_tf

    _setup_tf()
    started = time.perf_counter()
    overrides = [*QUALITY_JOBS[spec["job"]], f"runtime.seed={spec['seed']}", *spec["overrides"]]
    exp = _fit(overrides, Path(spec["work"]))
    history = exp.fit_history.history
    return {
        "val_accuracy": float(history["val_accuracy"][-1]),
        "val_accuracy_by_epoch": [round(float(v), 6) for v in history["val_accuracy"]],
        "loss": float(history["loss"][-1]),
        "val_loss": float(history["val_loss"][-1]),
        "fit_seconds": round(time.perf_counter() - started, 2),
    }


def estimates(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds per fit by job: the median wall time of earlier rows, else `FIT_SECONDS`."""
    out = dict(FIT_SECONDS)
    for job in {r["job"] for r in rows}:
        walls = [r["wall_seconds"] for r in rows if r["job"] == job and "val_accuracy" in r]
        if walls:
            out[job] = statistics.median(walls)
    return out


def _slots(parallel: int, per_child: int) -> list[list[int]]:
    cores = sorted(os.sched_getaffinity(0))
    n = max(1, min(parallel, len(cores) // per_child)) if len(cores) >= per_child else 1
    return [cores[i * per_child : (i + 1) * per_child] or cores for i in range(n)]


def run_grid(todo: list[dict[str, Any]], out: Path, args: argparse.Namespace) -> None:
    """Run `todo`'s fits as pinned children, appending each row to quality.jsonl at once."""
    jsonl = out / "quality.jsonl"
    per_fit = estimates(_read(jsonl))
    free = _slots(args.parallel, args.cores)
    queue: deque[dict[str, Any]] = deque(todo)
    running: dict[int, tuple[Any, ...]] = {}
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="kdist-quality-"))
    while queue or running:
        while queue and free:
            cell = queue[0]
            left = args.deadline - (time.monotonic() - started) if args.deadline else math.inf
            if per_fit[cell["job"]] > left:
                print(f"quality_grid: deadline: {len(queue)} fits not started", flush=True)
                queue.clear()
                break
            queue.popleft()
            cores = free.pop(0)
            name = cell["key"].replace("/", "_")
            spec = {**cell, "cores": cores, "work": str(work / name)}
            log = open(work / f"{name}.log", "w+")  # noqa: SIM115 (closed when the fit ends)
            proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.quality_grid", "--one", json.dumps(spec)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed whole at a timeout
            )
            limit = max(MIN_TIMEOUT, TIMEOUT_FACTOR * per_fit[cell["job"]])
            running[proc.pid] = (proc, cell, cores, time.monotonic(), limit, log)
        time.sleep(0.2)
        for pid, (proc, cell, cores, began, limit, log) in list(running.items()):
            now = time.monotonic()
            wall = now - began
            # With a deadline, no fit outlives it by more than twice the longest estimate.
            late = args.deadline and now - started > args.deadline + 2 * max(per_fit.values())
            timed_out = proc.poll() is None and (wall > limit or bool(late))
            if proc.poll() is None and not timed_out:
                continue
            if timed_out:
                os.killpg(pid, signal.SIGKILL)
                proc.wait()
            del running[pid]
            free.append(cores)
            log.seek(0)
            row = _row(cell, log.read(), wall, len(cores), proc.returncode, timed_out)
            log.close()
            with jsonl.open("a") as f:
                f.write(json.dumps(row) + "\n")
            accuracy = row.get("val_accuracy")
            shown = f"{accuracy:.4f}" if accuracy is not None else row["error"][-300:]
            print(f"{cell['key']}: {shown} ({wall:.0f} s)", flush=True)
            _write_md(out, args)
            per_fit = estimates(_read(jsonl))


def _row(
    cell: dict[str, Any], text: str, wall: float, cores: int, rc: int, timed_out: bool
) -> dict[str, Any]:
    """A fit's row from its child's output: the child's result, or the error."""
    row = {k: cell[k] for k in ("key", "job", "setting", "seed", "overrides")}
    row |= {"wall_seconds": round(wall, 2), "cores": cores, "rc": rc}
    found = [line for line in text.splitlines() if line.startswith(RESULT)]
    if found:
        row |= json.loads(found[-1][len(RESULT) :])
    else:
        row["error"] = "timeout" if timed_out else text[-1500:]
    row["load"] = round(os.getloadavg()[0], 2)
    return row


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_md(out: Path, args: argparse.Namespace) -> None:
    header = [
        f"Machine: {os.cpu_count()} CPU cores; {args.parallel} children of {args.cores} "
        f"cores at once, each mirrored over 2 logical CPUs; written "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
    ]
    (out / "quality.md").write_text(markdown(_read(out / "quality.jsonl"), header, args.seeds))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "quality-out")))
    parser.add_argument("--only", action="append", help="fnmatch on job/setting/seed")
    parser.add_argument("--seeds", type=int, default=len(SEEDS), help="seeds 1..N")
    parser.add_argument("--deadline", type=float, default=0.0, help="seconds; 0: none")
    parser.add_argument("--estimate", action="store_true", help="print the plan and stop")
    parser.add_argument("--redo", action="store_true", help="rerun cells already in the file")
    parser.add_argument("--prior", type=Path, help="a quality.jsonl of an earlier run to add")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: one fit, then its row
    default_parallel = max(1, (os.cpu_count() or 2) // 2)
    args = parser.parse_args(argv)
    args.parallel = int(os.environ.get("QUALITY_PARALLEL", default_parallel))
    args.cores = int(os.environ.get("QUALITY_CORES", "2"))
    if args.one:
        print(RESULT + json.dumps(one(json.loads(args.one))), flush=True)
        sys.stdout.flush()
        os._exit(0)  # as local_sgd: the interpreter's exit can wait on TF's executors
    from benchmarks.local_sgd import QUALITY_JOBS

    jobs = sorted(QUALITY_JOBS, key=lambda j: -FIT_SECONDS.get(j, 0))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.prior:  # an earlier call's rows (a device's $OUT starts empty): skipped, summed
        known = {r["key"] for r in _read(args.out / "quality.jsonl")}
        with (args.out / "quality.jsonl").open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in _read(args.prior) if r["key"] not in known)
    done = {r["key"] for r in _read(args.out / "quality.jsonl") if "val_accuracy" in r}
    plan = cells(jobs, tuple(range(1, args.seeds + 1)), only=args.only)
    todo = [c for c in plan if args.redo or c["key"] not in done]
    per_fit = estimates(_read(args.out / "quality.jsonl"))
    slots = len(_slots(args.parallel, args.cores))
    total = sum(per_fit[c["job"]] for c in todo)
    print(
        f"quality_grid: {len(todo)} fits to run ({len(plan) - len(todo)} of the plan done); "
        "per fit "
        + ", ".join(f"{j} {per_fit[j]:.0f} s" for j in jobs)
        + "; estimate "
        + ", ".join(f"{total / n:.0f} s with {n} at once" for n in sorted({slots, args.parallel}))
        + f" (here: {slots} of {args.cores} cores)",
        flush=True,
    )
    if not args.estimate:
        run_grid(todo, args.out, args)
        _write_md(args.out, args)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
