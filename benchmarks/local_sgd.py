"""Suite `local_sgd` (issue 45): local SGD and DiLoCo against every-step all-reduce.

Run with `python -m benchmarks.local_sgd` (about 10 minutes on 2 cores; `--part` picks
`correctness`, `speed` or `quality`; `--job` picks quality jobs, the others' results are
kept). It writes `benchmarks/results/local-sgd.json` and `local-sgd.md`. Every ratio is
measured interleaved in one process.

1. **Correctness** (in process, mirrored over 2 logical CPUs, plain SGD): `local_sgd`
   with `sync_every=1` against `every_step` (largest weight difference, target 1e-5);
   the replicas' largest disagreement right after each average of a `sync_every=4`
   run (target 0) and between averages (expected > 0); all-reduces per step, counted
   while tracing (gradient all-reduces traced by the local step: 0; one per average),
   target `1 / sync_every`.
2. **Speed** (processes, `kdist.launch`): the CNN of the scaling suite
   (`benchmarks.cluster.JOB`) on 2 multi-worker-mirrored workers, `local_sgd` with
   `sync_every=8` against `every_step`, examples/s of the second epoch, rounds
   alternating. Target: at least 1.5x.
3. **Quality** (in process, mirrored over 2 logical CPUs): the digits job and the CNN on
   synthetic 8x8 data (4 classes, SGD with momentum), validation accuracy after the
   same epochs for `every_step`,
   `local_sgd` with `sync_every` 4, 8 and 16, and `diloco` (`sync_every` 8, 16, 32 and 64), averaged
   over `SEEDS` seeds. Target: within 1 point of `every_step`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

RESULTS = Path(__file__).with_name("results")
SEEDS = (1, 2)
SPEED_ROUNDS = int(os.environ.get("KDIST_LOCAL_SGD_ROUNDS", "2"))


def _setup_tf() -> Any:
    import kdist

    kdist.quiet_tensorflow(2)
    import tensorflow as tf

    (cpu,) = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    return tf


def _fit(overrides: list[str], run_dir: Path) -> Any:
    import kdist

    exp = kdist.Experiment(kdist.compose(overrides), run_dir=run_dir)
    exp.fit_history = exp.fit()
    return exp


def _spread(exp: Any) -> float:
    import numpy as np

    worst = 0.0
    for variable in exp.model.trainable_variables:
        copies = [np.asarray(c) for c in variable.value.values]
        worst = max(worst, float(np.max(np.abs(copies[0] - copies[1]))))
    return worst


def _max_diff(a: Any, b: Any) -> float:
    import numpy as np

    return max(
        float(np.max(np.abs(x - y)))
        for x, y in zip(a.model.get_weights(), b.model.get_weights(), strict=True)
    )


CORRECTNESS_JOB = [
    "strategy=mirrored",
    "runtime.logical_devices=2",
    "model=mlp",
    "optimizer=sgd",
    "optimizer.momentum=0.0",
    "optimizer.learning_rate=0.1",
    "trainer.epochs=2",
    "trainer.steps_per_epoch=16",
    "trainer.global_batch_size=64",
    "trainer.verbose=0",
    "callbacks=minimal",
]


def correctness(work: Path) -> dict[str, Any]:
    from kdist.strategies.compression import reduced_bytes

    every = _fit([*CORRECTNESS_JOB, "trainer.allreduce_dtype=bfloat16"], work / "c_every")
    reference = _fit(CORRECTNESS_JOB, work / "c_ref")
    local1 = _fit(
        [*CORRECTNESS_JOB, "strategy.sync.mode=local_sgd", "strategy.sync.sync_every=1"],
        work / "c_local1",
    )
    local4 = _fit(
        [
            *CORRECTNESS_JOB,
            "strategy.sync.mode=local_sgd",
            "strategy.sync.sync_every=4",
            "trainer.allreduce_dtype=bfloat16",
        ],
        work / "c_local4",
    )
    runner = local4.runner
    after, between = [], []
    runner.train_loop_begin(reset_metrics=True)
    for _ in range(2):  # two more averaging periods, measured step by step
        for step in range(4):
            runner.train_steps(1)
            (after if step == 3 else between).append(_spread(local4))
    count = runner.averager.count
    steps = 2 * 16 + 8
    gradient_traces = reduced_bytes(local4.optimizer)
    return {
        "sync_every_1_vs_every_step_max_weight_diff": _max_diff(reference, local1),
        "target_max_weight_diff": 1e-5,
        "spread_after_each_average": max(after),
        "spread_between_averages_min": min(between),
        "gradient_all_reduces_traced_by_local_steps": len(gradient_traces.traces)
        if gradient_traces
        else 0,
        "every_step_gradient_all_reduce_bytes_per_step": reduced_bytes(every.optimizer).per_step,
        "averages": count.syncs,
        "all_reduces_per_average": count.all_reduces,
        "average_bytes_bf16": count.bytes,
        "steps": steps,
        "all_reduces_per_step": count.syncs * count.all_reduces / steps,
        "target_all_reduces_per_step": 1 / 4,
    }


def speed(work: Path) -> dict[str, Any]:
    from benchmarks.cluster import JOB, _throughput
    from benchmarks.processes import launch_cluster

    sides = {
        "every_step": [],
        "local_sgd_8": ["strategy.sync.mode=local_sgd", "strategy.sync.sync_every=8"],
    }
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(SPEED_ROUNDS):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        for name in order:
            done = launch_cluster(
                workers=2,
                ps=0,
                overrides=[*JOB, "strategy=multi_worker_mirrored", *sides[name]],
                run_dir=work / f"speed_{round_}_{name}",
                prefix="[worker 0]",
            )
            samples[name].append(_throughput(done, name)[0])
            print(f"speed {name}: {samples[name][-1]:.1f} examples/s", flush=True)
    medians = {name: statistics.median(v) for name, v in samples.items()}
    return {
        "job": "benchmarks.cluster.JOB (MNIST CNN, synthetic 28x28, global batch 128)",
        "workers": 2,
        "rounds": SPEED_ROUNDS,
        "examples_per_sec": samples,
        "median_examples_per_sec": medians,
        "ratio_local_sgd_8_over_every_step": medians["local_sgd_8"] / medians["every_step"],
        "target_ratio": 1.5,
    }


QUALITY_JOBS = {
    "digits": [
        "strategy=mirrored",
        "runtime.logical_devices=2",
        "trainer.epochs=6",
        "trainer.verbose=0",
        "callbacks=minimal",
    ],
    # The scaling suite's CNN on data it learns in a few epochs on 2 cores: at 28x28 the
    # labels (argmax of a random linear map of 784 noise pixels) stayed at chance (loss
    # ln 4 after 4 epochs of 4096 examples); at 8x8 with 32768 examples and SGD at 0.01,
    # every_step reached 0.81 after 4 epochs in a single run (12x12: 0.60; lr 0.05: 0.79).
    "cnn_synthetic": [
        "strategy=mirrored",
        "runtime.logical_devices=2",
        "model=cnn",
        "data=synthetic",
        "data.source.input_shape=[8,8,1]",
        "data.source.num_train=32768",
        "data.source.num_validation=1024",
        "data.source.num_classes=4",
        "optimizer=sgd",
        "optimizer.learning_rate=0.01",
        "trainer.global_batch_size=64",
        "trainer.epochs=4",
        "trainer.verbose=0",
        "callbacks=minimal",
    ],
}
# What the measured rows say beyond the table (from the run of 2026-11-26, 2 seeds).
QUALITY_NOTES = {
    "cnn_synthetic": [
        "local_sgd is at or above every_step here (negative points), with about the same "
        "training loss; 1 point is about 10 of the 1024 validation examples. diloco_8 "
        "misses: with SGD and momentum 0.9 as the inner optimizer and the paper's outer "
        "settings (Nesterov, learning rate 0.7, momentum 0.9) over periods of 8 steps, its "
        "training loss ends higher (0.64 against 0.42).",
        "",
        "Single runs with seed 1 on the same job, not part of the table (every_step 0.8066, "
        "local_sgd_8 0.8457): diloco sync_every=8 with outer learning rate 1.0 and "
        "momentum 0 (plain averaging) 0.846; with outer momentum 0.5 0.818; diloco "
        "sync_every=32 with the paper's outer settings 0.800; with Adam (learning rate "
        "1e-3) every_step 0.836, diloco_8 0.820. The outer momentum of 0.9 over short "
        "periods is what costs here.",
        "",
        "Longer periods, as DiLoCo is meant to run (added 2026-11-26 23:04, the same 2 "
        "seeds): diloco_16 0.83 and diloco_64 0.05 points below every_step (met), "
        "diloco_32 2.05 below (missed: seed 1 0.7998, 0.7 below its every_step; seed 2 "
        "0.7676, 3.4 below). One mode's accuracy moves 1-4 points from seed to seed on "
        "this job, so 2 seeds do not order 16, 32 and 64; diloco_8 is below on both seeds "
        "(5.27 points on average). On the digits job every diloco row is at or above "
        "every_step.",
        "",
    ]
}
# Accuracy of a guess, for the jobs whose data a few epochs may not learn.
CHANCE = {"cnn_synthetic": 0.25}
MODES = {
    "every_step": [],
    "local_sgd_4": ["strategy.sync.mode=local_sgd", "strategy.sync.sync_every=4"],
    "local_sgd_8": ["strategy.sync.mode=local_sgd", "strategy.sync.sync_every=8"],
    "local_sgd_16": ["strategy.sync.mode=local_sgd", "strategy.sync.sync_every=16"],
    "diloco_8": ["strategy.sync.mode=diloco", "strategy.sync.sync_every=8"],
    # DiLoCo is meant for long periods (the paper: 500 steps); the guide's example is 32.
    "diloco_16": ["strategy.sync.mode=diloco", "strategy.sync.sync_every=16"],
    "diloco_32": ["strategy.sync.mode=diloco", "strategy.sync.sync_every=32"],
    "diloco_64": ["strategy.sync.mode=diloco", "strategy.sync.sync_every=64"],
}


def quality(work: Path, jobs: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"seeds": list(SEEDS)}
    for job_name in jobs or list(QUALITY_JOBS):
        job = QUALITY_JOBS[job_name]
        load = os.getloadavg()[0]
        started = time.perf_counter()
        accuracies: dict[str, list[float]] = {mode: [] for mode in MODES}
        losses: dict[str, list[float]] = {mode: [] for mode in MODES}
        for seed in SEEDS:
            for mode, more in MODES.items():  # interleaved: every mode per seed
                exp = _fit(
                    [*job, f"runtime.seed={seed}", *more], work / f"q_{job_name}_{seed}_{mode}"
                )
                accuracy = float(exp.fit_history.history["val_accuracy"][-1])
                accuracies[mode].append(accuracy)
                losses[mode].append(float(exp.fit_history.history["loss"][-1]))
                print(f"quality {job_name} seed {seed} {mode}: {accuracy:.4f}", flush=True)
        means = {mode: statistics.mean(v) for mode, v in accuracies.items()}
        out[job_name] = {
            "accuracy": accuracies,
            "mean_accuracy": means,
            "last_epoch_train_loss": losses,
            "job": job,
            "points_below_every_step": {
                mode: 100 * (means["every_step"] - means[mode]) for mode in MODES
            },
            "seeds": list(SEEDS),
            "load_at_start": load,
            "load_after": os.getloadavg()[0],
            "seconds": time.perf_counter() - started,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        }
    out["target_points"] = 1.0
    return out


def _markdown(results: dict[str, Any]) -> str:
    lines = ["# local_sgd suite (issue 45)", "", f"Machine: {results['machine']}", ""]
    c = results.get("correctness")
    if c:
        lines += [
            "## Correctness (mirrored, 2 logical CPUs, plain SGD)",
            "",
            f"- local_sgd sync_every=1 vs every_step, largest weight difference: "
            f"{c['sync_every_1_vs_every_step_max_weight_diff']:.3g} (target < 1e-5: "
            f"{'met' if c['sync_every_1_vs_every_step_max_weight_diff'] < 1e-5 else 'missed'})",
            f"- replicas' largest disagreement right after each average: "
            f"{c['spread_after_each_average']:.3g} (target 0); between averages at least "
            f"{c['spread_between_averages_min']:.3g}",
            f"- all-reduces per step (counted while tracing): {c['all_reduces_per_step']:.4f} "
            f"(target 1/sync_every = {c['target_all_reduces_per_step']}); gradient all-reduces "
            f"traced by local steps: {c['gradient_all_reduces_traced_by_local_steps']}; bytes "
            f"per average (bf16): {c['average_bytes_bf16']} vs every_step's "
            f"{c['every_step_gradient_all_reduce_bytes_per_step']} per step",
            "",
        ]
    s = results.get("speed")
    if s:
        ratio = s["ratio_local_sgd_8_over_every_step"]
        lines += [
            "## Speed (2 MWMS workers on 2 cores, the scaling suite's CNN)",
            "",
            f"- examples/s (median of {s['rounds']} interleaved rounds): every_step "
            f"{s['median_examples_per_sec']['every_step']:.1f}, local_sgd sync_every=8 "
            f"{s['median_examples_per_sec']['local_sgd_8']:.1f}",
            f"- ratio {ratio:.2f} (target >= 1.5: {'met' if ratio >= 1.5 else 'missed'})",
        ]
        for earlier in s.get("earlier_runs", []):
            lines.append(f"- an earlier run on the same machine: {earlier}")
        lines.append("")
    q = results.get("quality")
    if q:
        lines += [f"## Quality (validation accuracy, mean over seeds {q['seeds']})", ""]
        for job in QUALITY_JOBS:
            if job not in q:
                continue
            losses = q[job].get("last_epoch_train_loss", {})
            chance = job in CHANCE and q[job]["mean_accuracy"]["every_step"] < CHANCE[job] + 0.1
            lines.append(f"### {job}")
            lines.append("")
            lines += [f"Job: `{' '.join(q[job]['job'])}`.", ""]
            if "seeds" in q[job]:
                lines += [
                    f"Seeds {q[job]['seeds']}, run {q[job]['date']} in "
                    f"{q[job]['seconds']:.0f} s; load {q[job]['load_at_start']:.1f} at start, "
                    f"{q[job]['load_after']:.1f} after (2 cores shared with other runs).",
                    "",
                ]
            lines += QUALITY_NOTES.get(job, [])
            if chance:
                lines += [
                    f"every_step ends near chance ({CHANCE[job]}; training loss near "
                    "ln 4 = 1.386): as in the scaling suite's curves (a plateau near ln 10), "
                    "the CNN does not learn this synthetic data in a few epochs, so this "
                    "table is recorded, not judged.",
                    "",
                ]
            lines.append(
                "| mode | mean accuracy | points below every_step | last epoch's training "
                "loss (mean) | target (<= 1 point) |"
            )
            lines.append("|---|---|---|---|---|")
            for mode in MODES:
                below = q[job]["points_below_every_step"][mode]
                verdict = "not judged" if chance else ("met" if below <= 1.0 else "missed")
                loss = statistics.mean(losses[mode]) if mode in losses else float("nan")
                lines.append(
                    f"| {mode} | {q[job]['mean_accuracy'][mode]:.4f} | {below:.2f} | "
                    f"{loss:.4f} | {verdict} |"
                )
            lines.append("")
    lines += [
        "No 16-core machine was lent to this session: the 16-core rows of issue 45 "
        "(2 workers with local_sgd >= 0.9 of one process; 8+8 cores vs 8 >= 0.85) were "
        "not measured.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", action="append", choices=("correctness", "speed", "quality"))
    parser.add_argument(
        "--job",
        action="append",
        choices=tuple(QUALITY_JOBS),
        help="quality job(s) to run; the other jobs' results are kept",
    )
    parser.add_argument("--name", default="local-sgd", help="results file stem")
    args = parser.parse_args(argv)
    parts = args.part or ["correctness", "speed", "quality"]
    _setup_tf()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.name}.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    results["machine"] = f"{os.cpu_count()} CPU cores, load {os.getloadavg()[0]:.1f} at start"
    results["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="kdist-local-sgd-") as tmp:
        work = Path(tmp)
        for part in parts:
            started = time.perf_counter()
            if part == "quality":
                results[part] = quality(work, args.job)
            else:
                results[part] = {"correctness": correctness, "speed": speed}[part](work)
            results[part]["seconds"] = time.perf_counter() - started
            results[part]["load_after"] = os.getloadavg()[0]
            # Parts may run in separate processes: keep what another one wrote since.
            done = results[part]
            results = json.loads(path.read_text()) if path.exists() else results
            if part == "quality" and args.job:  # one job rerun: keep the others' rows
                done = {**results.get(part, {}), **{job: done[job] for job in args.job}}
            results[part] = done
            path.write_text(json.dumps(results, indent=2) + "\n")
            (RESULTS / f"{args.name}.md").write_text(_markdown(results))
            print(json.dumps({part: results[part]}, indent=1), flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # After many experiments in one process (2-replica strategies, their executors) the
    # interpreter's exit waited for minutes on the 2-core machine: the results are written.
    os._exit(0)


if __name__ == "__main__":
    main()
