"""Where a worker's time goes (issue 53): the second epoch of each worker of a 2-worker local
multi-worker-mirrored cluster, split into its calls, beside the cluster's throughput.

Run with `python -m benchmarks.time_split` (`--rounds`, `--modes`, `--name`). It writes
`benchmarks/results/time-split.json` and `.md`.

**The comparison** (the 2-core stand-in for the 16-core machine): one process on all the
cores (`strategy=one_device`) against 2 workers (`kdist.launch` pins each to its half of
the cores, 1 core each on 2 cores) in every mode (`every_step`, `local_sgd` and `diloco`
at `sync_every` 8 and 32), the CNN of `benchmarks.cluster.JOB` at global batch 32 (a step
about as short as the 16-core machine's at 256), examples/s of the second epoch, the
sides in an order that reverses every round, so the ratios are measured interleaved.
Knobs (environment): `KDIST_SPLIT_CORES` (the cores of the machine used, default all
this process may use), `KDIST_SPLIT_BATCH` (global batch, default 16 per core: 32 on 2,
256 on 16), `KDIST_BENCH_STEPS` (steps an epoch, default 64). `KDIST_SPLIT_CORES=16
KDIST_BENCH_STEPS=48` gives the 16-core rows; `--half` adds one process on half the
cores at half the batch (weak scaling), and `--apart` two such processes at once, each on
its half, with nothing between them (the cluster's ceiling on this machine: shared caches,
memory and clocks included), and `--lone` the same two processes, each the one worker of
a cluster of its own (a worker's runtime without a peer). The `local_sgd_epoch` mode
averages only at the epoch's end: what a peer costs the local steps, the averages aside.
`benchmarks/device_split.py` runs the 16-core rows on the lent machine.

**The split** (`benchmarks.probes.TimeSplitProbe` in every process, each writing its
timestamps to a file of its own under this benchmark's folder): from the second epoch's
`on_epoch_begin` to its `on_epoch_end`, each instant is given to the innermost call
running then: `step` (the runner's train-function calls, `StandardRunner.train_steps`),
`average` (`WeightAverager.average`: all-reduce and apply), `read` (the epoch's metrics
at `train_loop_end` and the batch logs' conversion to floats), `callbacks` (the
controller's callback hooks, less the conversion) and `other` (the loop itself, the
savers, the rest). **Waits for the other worker** are measured per call, by timestamps
at call boundaries compared across workers: the n-th call of a kind is the same call on
both workers, and the part of a worker's call beyond the same call's time on the
fastest worker is waiting (a collective ends when the last worker reaches it). They are
given for averages and reads, and for the step calls too (`step_beyond_fastest`): the
train function reads Keras's sync-on-read metrics at the end of every call (a
cross-worker reduction under MWMS), and `every_step` all-reduces in every step, so a
wait there stays inside the step calls; the step share counts it. The target (issue 53):
the share of a worker's epoch outside its step calls <= 5 % at `sync_every=32`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "MODES",
    "apart_row",
    "cluster_row",
    "exclusive",
    "main",
    "markdown",
    "measure",
    "one_row",
    "split_workers",
    "summarize",
]

RESULTS = Path(__file__).with_name("results")
CATEGORIES = ("step", "average", "read", "callbacks")  # as `benchmarks.probes` records
WAITED = ("step", "average", "read")  # calls that may hold a collective
MODES: dict[str, list[str]] = {
    "every_step": [],
    "local_sgd_8": ["strategy.sync.mode=local_sgd", "strategy.sync.sync_every=8"],
    "local_sgd_32": ["strategy.sync.mode=local_sgd", "strategy.sync.sync_every=32"],
    "diloco_8": ["strategy.sync.mode=diloco", "strategy.sync.sync_every=8"],
    "diloco_32": ["strategy.sync.mode=diloco", "strategy.sync.sync_every=32"],
    "local_sgd_32_overlap4": [
        "strategy.sync.mode=local_sgd",
        "strategy.sync.sync_every=32",
        "strategy.sync.overlap_steps=4",
    ],
    "diloco_32_overlap4": [
        "strategy.sync.mode=diloco",
        "strategy.sync.sync_every=32",
        "strategy.sync.overlap_steps=4",
    ],
    # No average inside the epoch but its last (64 steps an epoch): what being in a
    # cluster costs the local steps, apart from the averages.
    "local_sgd_epoch": ["strategy.sync.mode=local_sgd", "strategy.sync.sync_every=100000"],
    # The default callbacks (TensorBoard, CSV, checkpoints, a backup every 100 steps: one in
    # the measured epoch, between two averages): the chief's own work and the saves.
    "diloco_32_default_callbacks": [
        "strategy.sync.mode=diloco",
        "strategy.sync.sync_every=32",
        "callbacks=default",
    ],
}
Event = Sequence[Any]  # (category, start, end), seconds on one clock


# -- the arithmetic --------------------------------------------------------------------


def exclusive(events: Sequence[Event]) -> list[tuple[str, float, float, float]]:
    """Each event with its own time: its duration less that of the events nested in it
    (calls on one thread nest or follow each other), in the order they started."""
    ordered = sorted(events, key=lambda e: (float(e[1]), -float(e[2])))
    out: list[list[Any]] = []
    open_: list[int] = []
    for category, start, end in ordered:
        start, end = float(start), float(end)
        while open_ and out[open_[-1]][2] <= start:
            open_.pop()
        if open_:
            out[open_[-1]][3] -= end - start
        out.append([str(category), start, end, end - start])
        open_.append(len(out) - 1)
    return [(c, s, e, own) for c, s, e, own in out]


def split_workers(records: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each worker's measured epoch split into seconds by kind of call.

    Args:
        records: per worker, `{"window": [start, end], "events": [(category, start,
            end), ...]}` as `TimeSplitProbe` writes them.

    Returns:
        Per worker: `wall`, the seconds of each category and `other` (the rest of the
        wall), `<category>_calls`, `<category>_beyond_fastest` (the part of its calls
        beyond the same call's time on the fastest worker, for step, average and read;
        0 with one worker), `outside_steps_share` (1 - step / wall), and where the record
        has them the CPU seconds of its threads by kind, `cpu_main`, `cpu_compute` and
        `cpu_other` (`benchmarks.probes.thread_cpu`).
    """
    own: dict[str, dict[str, list[float]]] = {}
    for name, record in records.items():
        per: dict[str, list[float]] = {c: [] for c in CATEGORIES}
        for category, _, _, seconds in exclusive(record["events"]):
            per.setdefault(category, []).append(seconds)
        own[name] = per
    out: dict[str, dict[str, Any]] = {}
    for name, record in records.items():
        start, end = (float(t) for t in record["window"])
        row: dict[str, Any] = {"wall": end - start}
        for category in CATEGORIES:
            calls = own[name][category]
            row[category] = sum(calls)
            row[f"{category}_calls"] = len(calls)
        row["other"] = row["wall"] - sum(row[c] for c in CATEGORIES)
        for category in WAITED:
            lists = [own[other][category] for other in own]
            common = min(len(calls) for calls in lists)
            row[f"{category}_beyond_fastest"] = sum(
                own[name][category][k] - min(calls[k] for calls in lists) for k in range(common)
            )
        row["outside_steps_share"] = 1 - row["step"] / row["wall"] if row["wall"] > 0 else 0.0
        for kind, seconds in (record.get("cpu") or {}).items():
            row[f"cpu_{kind}"] = float(seconds)
        out[name] = row
    return out


def pooled(splits: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Several rounds' splits of one worker as one: seconds summed, then shares of the
    summed wall (`<key>_share`)."""
    keys = [k for k, v in splits[0].items() if isinstance(v, (int, float)) and k != "wall"]
    wall = sum(float(s["wall"]) for s in splits)
    total = {key: sum(float(s[key]) for s in splits) for key in keys if not key.endswith("share")}
    out = {"wall": wall, **total}
    for key in total:
        if not key.endswith("_calls"):
            out[f"{key}_share"] = total[key] / wall if wall > 0 else 0.0
    out["outside_steps_share"] = 1 - total["step"] / wall if wall > 0 else 0.0
    return out


# -- the runs --------------------------------------------------------------------------


def _settings() -> dict[str, int]:
    cores = int(os.environ.get("KDIST_SPLIT_CORES") or len(os.sched_getaffinity(0)))
    batch = int(os.environ.get("KDIST_SPLIT_BATCH") or 16 * cores)
    steps = int(os.environ.get("KDIST_BENCH_STEPS") or 64)
    return {"cores": cores, "batch": batch, "steps": steps}


def _job(batch: int, steps: int, split_dir: Path) -> list[str]:
    from benchmarks.cluster import JOB

    replaced = ("trainer.global_batch_size", "trainer.steps_per_epoch", "callbacks.extra")
    timer = "{_target_:benchmarks.probes.EpochTimer,steps_per_epoch:%d,global_batch_size:%d}"
    probe = f"{{_target_:benchmarks.probes.TimeSplitProbe,out_dir:'{split_dir}'}}"
    return [
        *(arg for arg in JOB if not arg.startswith(replaced)),
        f"trainer.global_batch_size={batch}",
        f"trainer.steps_per_epoch={steps}",
        f"callbacks.extra=[{timer % (steps, batch)},{probe}]",
    ]


def _importable() -> None:
    """Let the processes started import `benchmarks` (its probes) from any folder."""
    root = str(Path(__file__).resolve().parent.parent)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def _read_split(split_dir: Path) -> dict[str, dict[str, Any]]:
    records = {
        path.stem.removeprefix("split-"): json.loads(path.read_text())
        for path in sorted(split_dir.glob("split-*.json"))
    }
    if not records:
        raise RuntimeError(f"no time split written under {split_dir}")
    return split_workers(records)


def one_row(
    work: Path, tag: str, *, cpus: Sequence[int], batch: int, steps: int, timeout: float = 600
) -> dict[str, Any]:
    """One process (`strategy=one_device`) pinned to `cpus`: examples/s and its split."""
    from benchmarks.cluster import _throughput

    done = _one_process(work, tag, cpus=cpus, batch=batch, steps=steps, timeout=timeout)
    value, extra = _throughput(done, tag)
    return {"examples_per_sec": value, **extra, "split": _read_split(work / f"{tag}-split")}


def apart_row(
    work: Path,
    tag: str,
    *,
    cpus: Sequence[int],
    batch: int,
    steps: int,
    timeout: float = 600,
    lone: bool = False,
) -> dict[str, Any]:
    """Two independent processes at once (`strategy=one_device`, no cluster), each pinned
    to its half of `cpus` at half the global `batch`: their examples/s summed.

    The cluster's ceiling on this machine: the two workers' work with nothing between
    them, the cores' shared caches, memory and clocks included (one process on half the
    cores, run alone, leaves those to it). With `lone`, each process is instead the one
    worker of a cluster of its own (`strategy=multi_worker_mirrored`, a `TF_CONFIG` of one
    worker on a loopback port, `local_sgd` with no average inside the epoch): a worker's
    runtime (its gRPC server, the collective context, the distributed dataset) with no
    other worker to talk to.
    """
    from benchmarks.cluster import _throughput
    from kdist.launcher.tasks import free_ports

    halves = [cpus[: len(cpus) // 2], cpus[len(cpus) // 2 :]]
    done: dict[int, Any] = {}

    ports = free_ports(2) if lone else []

    def run(index: int) -> None:
        done[index] = _one_process(
            work,
            f"{tag}-{index}",
            cpus=halves[index],
            batch=batch // 2,
            steps=steps,
            timeout=timeout,
            lone_port=ports[index] if lone else None,
        )

    threads = [threading.Thread(target=run, args=(index,)) for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    value, split = 0.0, {}
    for index in (0, 1):
        if index not in done:
            raise RuntimeError(f"{tag}: process {index} did not finish")
        one_value, _ = _throughput(done[index], f"{tag}-{index}")
        value += one_value
        for task, found in _read_split(work / f"{tag}-{index}-split").items():
            split[f"apart-{index}" if task.startswith(("single", "worker")) else task] = found
    return {"examples_per_sec": value, "split": split}


def _one_process(
    work: Path,
    tag: str,
    *,
    cpus: Sequence[int],
    batch: int,
    steps: int,
    timeout: float,
    lone_port: int | None = None,
) -> Any:
    from benchmarks.processes import run_command

    _importable()
    strategy, env = ["strategy=one_device"], None
    if lone_port is not None:  # the one worker of a cluster of its own
        strategy = ["strategy=multi_worker_mirrored", *MODES["local_sgd_epoch"]]
        tf_config = {
            "cluster": {"worker": [f"127.0.0.1:{lone_port}"]},
            "task": {"type": "worker", "index": 0},
        }
        env = {"TF_CONFIG": json.dumps(tf_config)}
    return run_command(
        [
            "-m",
            "kdist.train",
            *_job(batch, steps, work / f"{tag}-split"),
            *strategy,
            f"hydra.run.dir={work / tag}",
        ],
        cwd=work,
        timeout=timeout,
        cpus=cpus,
        env=env,
    )


def cluster_row(
    work: Path, tag: str, *, mode: str, batch: int, steps: int, timeout: float = 600
) -> dict[str, Any]:
    """2 local MWMS workers (`kdist.launch` pins each to half the cores) in `mode`."""
    from benchmarks.cluster import _throughput
    from benchmarks.processes import launch_cluster

    _importable()
    split_dir = work / f"{tag}-split"
    done = launch_cluster(
        workers=2,
        ps=0,
        overrides=[*_job(batch, steps, split_dir), "strategy=multi_worker_mirrored", *MODES[mode]],
        run_dir=work / tag,
        prefix="[worker 0]",
        timeout=timeout,
    )
    value, extra = _throughput(done, tag)
    return {"examples_per_sec": value, **extra, "split": _read_split(split_dir)}


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or os.environ.get("KDIST_SPLIT_COMMIT", "unknown")


def measure(
    rounds: int,
    modes: Sequence[str],
    *,
    half: bool,
    apart: bool = False,
    lone: bool = False,
    timeout: float = 600,
    on_row: Callable[[str, dict[str, Any]], None] | None = None,
    keep_going: bool = False,
) -> dict[str, Any]:
    """The sides, interleaved (the order reverses every round).

    Args:
        rounds: rounds of every side.
        modes: the cluster's modes (keys of `MODES`).
        half: add one process on half the cores at half the batch.
        apart: add two independent processes at once, each on its half of the cores at
            half the batch (`apart_row`: the cluster's ceiling). Defaults to `False`.
        lone: add the same two processes, each the one worker of a cluster of its own
            (`apart_row(lone=True)`: a worker's runtime without a peer). Defaults to
            `False`.
        timeout: seconds for each side's run. Defaults to `600`.
        on_row: called with each side's name and row as soon as it exists (a failed one:
            `{"error": ...}`). Defaults to `None`.
        keep_going: a failed side is recorded and the others go on. Defaults to `False`.
    """
    from kdist.launcher.tasks import cores_of_workers

    settings = _settings()
    cores, batch, steps = settings["cores"], settings["batch"], settings["steps"]
    cpus = sorted(os.sched_getaffinity(0))[:cores]
    one = f"one_{cores}cores_b{batch}"
    sides = [one, *(f"mwms2_{mode}_b{batch}" for mode in modes)]
    if half:
        sides.append(f"one_{cores // 2}cores_b{batch // 2}")
    if apart:
        sides.append(f"apart2_{cores // 2}cores_b{batch // 2}")
    if lone:
        sides.append(f"lone2_{cores // 2}cores_b{batch // 2}")
    rows: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="kdist-time-split-") as tmp:
        work = Path(tmp)
        for round_ in range(rounds):
            for side in sides if round_ % 2 == 0 else list(reversed(sides)):
                tag = f"r{round_}_{side}"
                started = time.perf_counter()
                try:
                    if side == one:
                        row = one_row(
                            work, tag, cpus=cpus, batch=batch, steps=steps, timeout=timeout
                        )
                    elif side.startswith(("apart2_", "lone2_")):
                        row = apart_row(
                            work,
                            tag,
                            cpus=cpus,
                            batch=batch,
                            steps=steps,
                            timeout=timeout,
                            lone=side.startswith("lone2_"),
                        )
                    elif side.startswith("one_"):
                        row = one_row(
                            work,
                            tag,
                            cpus=cpus[: cores // 2],
                            batch=batch // 2,
                            steps=steps,
                            timeout=timeout,
                        )
                    else:
                        mode = side.removeprefix("mwms2_").rsplit("_b", 1)[0]
                        row = cluster_row(
                            work, tag, mode=mode, batch=batch, steps=steps, timeout=timeout
                        )
                except Exception as error:
                    if not keep_going:
                        raise
                    row = {"error": repr(error)[-600:]}
                row["seconds"] = time.perf_counter() - started
                if "error" not in row:
                    rows[side].append(row)
                    print(f"{tag}: {row['examples_per_sec']:.1f} examples/s", flush=True)
                if on_row is not None:
                    on_row(tag, row)
        load.append(os.getloadavg()[0])
    return {
        **settings,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": _commit(),
        "machine_cpus": os.cpu_count(),
        "rounds": rounds,
        "load_1min": {"before": load[0], "after": load[-1]},
        "worker_cpus": cores_of_workers(2, dict(os.environ)),
        "one_process": one,
        "rows": rows,
        "summary": summarize(rows, one),
    }


def summarize(rows: Mapping[str, Sequence[Mapping[str, Any]]], one: str) -> dict[str, Any]:
    """Each side's median examples/s, its ratio to `one`'s and its pooled split (sides
    without a row left out; no ratio without `one`)."""
    medians = {
        side: statistics.median(r["examples_per_sec"] for r in found)
        for side, found in rows.items()
        if found
    }
    summary = {}
    for side, median in medians.items():
        found = rows[side]
        summary[side] = {
            "median_examples_per_sec": median,
            "of_one_process": median / medians[one] if one in medians else None,
            "rounds": len(found),
            "split": {w: pooled([r["split"][w] for r in found]) for w in sorted(found[0]["split"])},
        }
    return summary


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def _cpu(split: Mapping[str, Any], steps: int) -> str:
    """The CPU columns of a task's row (`-` for a record made without them)."""
    if "cpu_compute" not in split:
        return "- | - |"
    kinds = ("compute", "main", "other")
    busy = sum(split[f"cpu_{kind}_share"] for kind in kinds)
    parts = " + ".join(_pct(split[f"cpu_{kind}_share"]) for kind in kinds)
    return f"{_pct(busy)} ({parts}) | {1000 * split['cpu_compute'] / steps:.1f} |"


def markdown(results: Mapping[str, Any], notes: Sequence[str] = ()) -> str:
    """The results as a Markdown page: the throughput rows, each with its split."""
    r = results
    lines = [
        "# Where a worker's time goes (issue 53)",
        "",
        f"`python -m benchmarks.time_split`, {r['date']}, kdist {r['commit']}, "
        f"{r['machine_cpus']} CPUs, {r['cores']} used; the CNN of `benchmarks.cluster.JOB` "
        f"at global batch {r['batch']}, {r['steps']} steps an epoch, second epoch; "
        f"{r['rounds']} interleaved round(s); load {r['load_1min']['before']:.1f} before, "
        f"{r['load_1min']['after']:.1f} after. Workers' CPUs: {r['worker_cpus']}.",
        "",
        *notes,
        "| row | examples/s (median) | of one process | task | epoch ms | step % | "
        "average % (beyond fastest) | read % (beyond fastest) | callbacks % | other % | "
        "outside step calls % | step calls beyond fastest % | CPU % of the epoch "
        "(compute + main + other) | compute CPU ms a step |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for side, row in r["summary"].items():
        first = True
        for task, s in row["split"].items():
            ratio = row["of_one_process"]
            shown = "-" if ratio is None else f"{ratio:.2f}"
            if ratio is not None and side.startswith("one_") and side != r["one_process"]:
                shown += f" (x2: {2 * ratio:.2f})"
            head = (
                f"| {side} | {row['median_examples_per_sec']:.1f} | {shown} " if first else "| | | "
            )
            first = False
            lines.append(
                f"{head}| {task} | {1000 * s['wall'] / row['rounds']:.0f} | "
                f"{_pct(s['step_share'])} | {_pct(s['average_share'])} "
                f"({_pct(s['average_beyond_fastest_share'])}) | {_pct(s['read_share'])} "
                f"({_pct(s['read_beyond_fastest_share'])}) | {_pct(s['callbacks_share'])} | "
                f"{_pct(s['other_share'])} | **{_pct(s['outside_steps_share'])}** | "
                f"{_pct(s['step_beyond_fastest_share'])} | {_cpu(s, row['rounds'] * r['steps'])}"
            )
    lines += [
        "",
        "Shares are of the task's measured epoch (its `on_epoch_begin` to its `on_epoch_end`"
        " hooks), summed over the rounds; epoch ms is a round's mean. 'beyond fastest': the "
        "part of the task's calls of that kind beyond the same call's time on the fastest "
        "worker (waiting for the other worker), included in the share before it. CPU: the "
        "CPU time of the task's threads over the epoch, by kind (TensorFlow's op pools, the "
        "main thread, the rest: gRPC, collectives, tf.data), as a share of its wall time (a "
        "worker below 100 % on its one core waited or was preempted); compute CPU ms a step "
        "compares the work each step costs. Target: outside step calls <= 5 % at "
        "sync_every=32.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=int(os.environ.get("ROUNDS", "1")))
    parser.add_argument("--modes", nargs="+", choices=tuple(MODES), default=list(MODES))
    parser.add_argument("--half", action="store_true", help="add one process on half the cores")
    parser.add_argument(
        "--apart", action="store_true", help="add two independent processes, one per half"
    )
    parser.add_argument(
        "--lone",
        action="store_true",
        help="add two independent processes, each the one worker of a cluster of its own",
    )
    parser.add_argument("--name", default="time-split", help="results file stem")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    parser.add_argument("--note", action="append", default=[], help="a line for the page")
    args = parser.parse_args(argv)
    results = measure(args.rounds, args.modes, half=args.half, apart=args.apart, lone=args.lone)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=1) + "\n")
    notes = [*args.note, ""] if args.note else []
    (args.out / f"{args.name}.md").write_text(markdown(results, notes))
    print(markdown(results, notes), flush=True)


if __name__ == "__main__":
    main()
