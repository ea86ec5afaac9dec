"""A slow link between the workers (issue 53): the time split's rows over a rate-limited loopback.

Run as root with `python -m benchmarks.slow_link` (`--rate 1gbit`, `--latency-ms 10`,
`--rounds`, `--modes`, `--name`). It makes a network namespace of its own whose loopback
passes at most `--rate` (Linux's `tbf` queueing discipline, `tc`), runs
`benchmarks.time_split`'s sides inside it (the one process needs no link; the 2 workers'
gRPC traffic crosses the limited loopback) and writes
`benchmarks/results/<name>.json` and `.md`: examples/s per mode, the bytes each mode sends
per step, and the same rows with the link's latency added by a stated model.

**The latency is modelled, not measured**: the machines this runs on have no `netem`
(`tc qdisc ... netem` answers 'qdisc kind unknown'), so nothing can delay a packet. The
model: a collective over 2 workers (a ring: each worker sends once and receives once)
waits `2 x latency` more per blocking collective. A worker blocks on one collective per
step under `every_step` (the gradients, one pack), and on two per average under the local
modes (the all-reduce of the weights and the metric read of the call that ends with it);
with `overlap_steps=k` the average's all-reduce is off the critical path while it takes
less than the k steps it overlaps (`max(0, 2 x latency - k x step)`), the metric read
still blocks. Modelled epoch = measured epoch + those waits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.time_split import MODES, RESULTS

__all__ = ["blocking_waits", "bytes_per_step", "main", "markdown", "modelled"]

NAMESPACE = "kdist-slow-link"
INSIDE = "KDIST_SLOW_LINK_INSIDE"


def _sync(mode: str) -> tuple[str, int, int]:
    """(sync mode, sync_every, overlap_steps) of a `time_split` mode's overrides."""
    settings = dict(o.split("=", 1) for o in MODES[mode])
    return (
        settings.get("strategy.sync.mode", "every_step"),
        int(settings.get("strategy.sync.sync_every", 1)),
        int(settings.get("strategy.sync.overlap_steps", 0)),
    )


def bytes_per_step(mode: str, weight_bytes: int) -> float:
    """What one worker hands the all-reduces per step: the gradients at every step, or the
    weights' change once every `sync_every` steps (float32)."""
    sync, every, _ = _sync(mode)
    return float(weight_bytes) if sync == "every_step" else weight_bytes / every


def blocking_waits(mode: str, *, steps: int, step_seconds: float, latency: float) -> float:
    """Seconds an epoch of `steps` steps waits for the link's latency (the model above)."""
    sync, every, overlap = _sync(mode)
    hop = 2 * latency
    if sync == "every_step":
        return steps * hop
    averages = -(-steps // every)
    return averages * (hop + max(0.0, hop - overlap * step_seconds))


def modelled(row: Mapping[str, Any], mode: str, *, steps: int, batch: int, latency: float) -> float:
    """Examples/s of a measured cluster row with the latency's waits added."""
    epoch = steps * batch / float(row["median_examples_per_sec"])
    waits = blocking_waits(mode, steps=steps, step_seconds=epoch / steps, latency=latency)
    return steps * batch / (epoch + waits)


def _weight_bytes() -> int:
    """float32 bytes of the CNN of `benchmarks.cluster.JOB` (built, not trained)."""
    from benchmarks.cluster import JOB
    from kdist import Experiment, compose

    exp = Experiment(compose([*JOB, "strategy=one_device"]))
    exp.build_model()
    assert exp.model is not None
    return sum(int(w.shape.num_elements() or 0) * 4 for w in exp.model.trainable_weights)


def markdown(results: Mapping[str, Any]) -> str:
    r = results
    one = r["time_split"]["summary"].get(r["time_split"]["one_process"], {})
    lines = [
        "# A slow link between the workers (issue 53)",
        "",
        f"`python -m benchmarks.slow_link`, {r['date']}, kdist {r['time_split']['commit']}: "
        f"the 2 workers' loopback limited to {r['rate']} (`tc` `tbf`, a network namespace of "
        f"its own), {r['time_split']['cores']} cores, global batch {r['time_split']['batch']}, "
        f"{r['time_split']['steps']} steps an epoch, second epoch, "
        f"{r['time_split']['rounds']} interleaved round(s); the CNN's weights are "
        f"{r['weight_bytes'] / 1e6:.1f} MB in float32. Latency {r['latency_ms']:g} ms is "
        "modelled (no `netem` here): see `benchmarks/slow_link.py`.",
        "",
        f"One process: {one.get('median_examples_per_sec', float('nan')):.1f} examples/s.",
        "",
        "| mode | MB sent per step (per worker) | examples/s at the rate (measured) | of one "
        f"process | + {r['latency_ms']:g} ms latency (modelled) | of one process |",
        "|---|---|---|---|---|---|",
    ]
    for mode, row in r["rows"].items():
        lines.append(
            f"| {mode} | {row['mb_per_step']:.2f} | {row['measured']:.1f} | "
            f"{row['measured_of_one']:.2f} | {row['modelled']:.1f} | {row['modelled_of_one']:.2f} |"
        )
    lines.append("")
    return "\n".join(lines)


def _inside(args: argparse.Namespace) -> None:
    from benchmarks.time_split import measure

    results = measure(args.rounds, args.modes, half=False)
    one = results["summary"].get(results["one_process"], {})
    base = one.get("median_examples_per_sec")
    weight_bytes = _weight_bytes()
    steps, batch = results["steps"], results["batch"]
    rows = {}
    for mode in args.modes:
        row = results["summary"].get(f"mwms2_{mode}_b{batch}")
        if row is None:
            continue
        value = modelled(row, mode, steps=steps, batch=batch, latency=args.latency_ms / 1000)
        measured = float(row["median_examples_per_sec"])
        rows[mode] = {
            "mb_per_step": bytes_per_step(mode, weight_bytes) / 1e6,
            "measured": measured,
            "measured_of_one": measured / base if base else float("nan"),
            "modelled": value,
            "modelled_of_one": value / base if base else float("nan"),
        }
    out = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rate": args.rate,
        "latency_ms": args.latency_ms,
        "weight_bytes": weight_bytes,
        "rows": rows,
        "time_split": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(out, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(out))
    print(markdown(out), flush=True)


def _ip(*words: str) -> None:
    subprocess.run(["ip", *words], check=True, timeout=30)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default="1gbit", help="tc rate of the workers' link")
    parser.add_argument("--latency-ms", type=float, default=10.0, help="modelled, one way")
    parser.add_argument("--rounds", type=int, default=1)
    default_modes = ["every_step", "local_sgd_32", "diloco_32", "diloco_32_overlap4"]
    parser.add_argument("--modes", nargs="+", choices=tuple(MODES), default=default_modes)
    parser.add_argument("--name", default="slow-link", help="results file stem")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    args = parser.parse_args(argv)
    if os.environ.get(INSIDE):
        _inside(args)
        return
    if os.geteuid() != 0 or shutil.which("tc") is None or shutil.which("ip") is None:
        sys.exit("benchmarks.slow_link: needs root and the `ip` and `tc` commands (iproute2)")
    _ip("netns", "add", NAMESPACE)
    try:
        _ip("netns", "exec", NAMESPACE, "ip", "link", "set", "lo", "up")
        # A token bucket on the loopback: at most `rate`, a burst of 256 KiB.
        _ip("netns", "exec", NAMESPACE, "tc", "qdisc", "add", "dev", "lo", "root", "tbf",
            "rate", args.rate, "burst", "256kb", "latency", "1s")  # fmt: skip
        command = ["ip", "netns", "exec", NAMESPACE, sys.executable, "-m", "benchmarks.slow_link"]
        # The tasks stay in this namespace: `kdist.launch` would otherwise make its own
        # private one, whose loopback the limit does not reach.
        env = {**os.environ, INSIDE: "1", "KDIST_BENCH_NO_ISOLATE": "1"}
        rest = list(argv if argv is not None else sys.argv[1:])
        # Every side has its own timeout inside (`benchmarks.time_split.measure`).
        subprocess.run([*command, *rest], env=env, check=True, timeout=6 * 3600)
    finally:
        subprocess.run(["ip", "netns", "del", NAMESPACE], check=False, timeout=30)


if __name__ == "__main__":
    main()
