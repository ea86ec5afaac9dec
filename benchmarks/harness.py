"""Interleaved A/B timing: rounds, statistics, targets and the machine description.

Runs on a shared 2-core machine vary by 10-40% from one minute to the next, so the two
sides of a comparison are never timed in separate blocks: each round runs every side
once, in an order that alternates between rounds (A B, B A, ...), and a ratio is taken
per round before the median. A slow minute then slows both sides of the same round.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Case",
    "Comparison",
    "Target",
    "interleave",
    "load_average",
    "machine",
    "settle",
    "summarize",
]


@dataclass
class Case:
    """One side of a comparison.

    Args:
        name: shown in the table, e.g. `"kdist"` or `"hand-written"`.
        run: runs one round and returns the measured value (seconds per step, examples
            per second, ...).
        setup: runs once before the first round (building models, tracing), or `None`.
    """

    name: str
    run: Callable[[], float]
    setup: Callable[[], None] | None = None


@dataclass(frozen=True)
class Target:
    """What the ratio A/B must satisfy: `op` is `"<="` or `">="`."""

    op: str
    value: float

    def met(self, ratio: float) -> bool:
        return ratio <= self.value if self.op == "<=" else ratio >= self.value

    def __str__(self) -> str:
        return f"{self.op} {self.value:g}"


@dataclass
class Comparison:
    """The result of one A/B comparison (or of a single measurement when `b` is `None`)."""

    id: str
    group: str
    title: str
    unit: str
    lower_is_better: bool
    a: dict[str, Any]
    b: dict[str, Any] | None
    ratio: dict[str, float] | None
    target: Target | None
    met: bool | None
    rounds: int
    load: dict[str, list[float]]
    details: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["target"] = None if self.target is None else str(self.target)
        return out


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (processes wanting a core)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def settle() -> None:
    """Collect garbage, then exempt every live object from later collections.

    A process holding several traced models has millions of tracked objects; a full
    collection then takes about a second on a loaded core and lands in whichever round
    happens to allocate (Hydra's compose, a Keras `fit` set-up). `gc.freeze` moves
    what exists now (models, traced functions) out of the collector's reach, so rounds
    pay only for their own garbage.
    """
    gc.collect()
    gc.freeze()


def interleave(
    cases: Sequence[Case],
    rounds: int,
    *,
    warmup: int = 1,
    cpu: dict[str, list[float]] | None = None,
) -> dict[str, list[float]]:
    """Run `rounds` timed rounds of every case, alternating the order between rounds.

    Args:
        cases: the sides to compare.
        rounds: timed rounds per case.
        warmup: untimed rounds per case before the first timed one (tracing, caches).
            Defaults to `1`.
        cpu: if given, filled with each round's CPU seconds of this process (all its
            threads) per case: less sensitive than wall time to other processes taking
            the cores, so its ratio is a second opinion on a loaded machine.
            Defaults to `None`.

    Returns:
        Case name -> the value of each timed round, in round order.
    """
    settle()
    for case in cases:
        if case.setup is not None:
            case.setup()
    for _ in range(warmup):
        for case in cases:
            case.run()
    settle()
    samples: dict[str, list[float]] = {case.name: [] for case in cases}
    for index in range(rounds):
        order = list(cases) if index % 2 == 0 else list(reversed(cases))
        for case in order:
            started = time.process_time()
            samples[case.name].append(float(case.run()))
            if cpu is not None:
                cpu.setdefault(case.name, []).append(time.process_time() - started)
    return samples


def _stats(name: str, values: Sequence[float], scale: float, lower_is_better: bool) -> dict:
    scaled = [v * scale for v in values]
    return {
        "name": name,
        "median": statistics.median(scaled),
        "min": min(scaled),
        "max": max(scaled),
        # The best round: the least time, or the most throughput.
        "best": min(scaled) if lower_is_better else max(scaled),
        "samples": scaled,
    }


def summarize(
    *,
    id: str,
    group: str,
    title: str,
    samples: dict[str, list[float]],
    a: str,
    b: str | None,
    unit: str,
    scale: float = 1.0,
    lower_is_better: bool = True,
    target: Target | None = None,
    load: dict[str, list[float]] | None = None,
    details: dict[str, Any] | None = None,
    note: str = "",
    cpu: dict[str, list[float]] | None = None,
) -> Comparison:
    """Turn interleaved samples into a `Comparison`.

    Each side gets its median, min, max and best round (the least time, or the most
    throughput). The ratio is A/B per round, then the median over rounds (`median`, what
    targets are checked against); `of_medians` and `of_best` are the ratios of the
    medians and of the best rounds.

    Args:
        id: a stable identifier, e.g. `"loop/mlp_k1"`.
        group: the comparison's section, e.g. `"1. kdist engine vs hand-written loop"`.
        title: the row's label.
        samples: as returned by `interleave`.
        a: the name of side A (kdist).
        b: the name of side B (the reference), or `None` for a single measurement.
        unit: unit of the scaled values, e.g. `"ms/step"`.
        scale: multiplies every value (e.g. 1000 for seconds to ms). Defaults to `1.0`.
        lower_is_better: times are; throughputs are not. Defaults to `True`.
        target: what the median ratio must satisfy. Defaults to `None`.
        load: load averages before and after. Defaults to `None`.
        details: anything else worth keeping. Defaults to `None`.
        note: a sentence for the table. Defaults to `""`.
        cpu: CPU seconds per round (from `interleave(cpu=...)`): adds `cpu_median`, the
            median per-round ratio of CPU time, to the ratio. Defaults to `None`.

    Returns:
        The `Comparison`.
    """
    stats_a = _stats(a, samples[a], scale, lower_is_better)
    stats_b = None if b is None else _stats(b, samples[b], scale, lower_is_better)
    ratio = None
    met = None
    if b is not None and stats_b is not None:
        paired = [x / y for x, y in zip(samples[a], samples[b], strict=True) if y]
        ratio = {
            "median": statistics.median(paired),
            "of_medians": stats_a["median"] / stats_b["median"],
            "of_best": stats_a["best"] / stats_b["best"],
        }
        if cpu and cpu.get(a) and cpu.get(b):
            ratio["cpu_median"] = statistics.median(
                x / y for x, y in zip(cpu[a], cpu[b], strict=True) if y
            )
        met = None if target is None else target.met(ratio["median"])
    elif target is not None:
        # A single measurement: the target is on its median.
        met = target.met(stats_a["median"])
    return Comparison(
        id=id,
        group=group,
        title=title,
        unit=unit,
        lower_is_better=lower_is_better,
        a=stats_a,
        b=stats_b,
        ratio=ratio,
        target=target,
        met=met,
        rounds=len(samples[a]),
        load=load or {},
        details=details or {},
        note=note,
    )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gb() -> float | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def _busy_processes() -> list[str]:
    """Other processes using the CPU right now (what makes the numbers noisy)."""
    try:
        out = subprocess.run(
            ["ps", "-eo", "pid,pcpu,args", "--sort=-pcpu", "--no-headers"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    busy = []
    for line in out.splitlines()[:12]:
        pid, cpu, args = [*line.split(None, 2), "", ""][:3]
        try:
            if int(pid) != os.getpid() and float(cpu) >= 10.0:
                busy.append(f"{float(cpu):.0f}% {args.strip()[:90]}")
        except ValueError:
            continue
    return busy


def machine() -> dict[str, Any]:
    """What the numbers were measured on: CPU, cores, memory, versions, load."""
    import keras
    import tensorflow as tf

    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "load_average": load_average(),
        "busy_processes": _busy_processes(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
