"""The cells of issue 53's quality grid and their summary (`benchmarks.quality_grid` runs them).

Pure Python, no TensorFlow: the grid's settings (`every_step`, `local_sgd` and `diloco` at
`SYNC_EVERY` for each of `CANDIDATES`), its fits in the order they start, and the arithmetic
of `quality.md` (per cell: mean, standard deviation, min and max of the validation accuracy,
points below `every_step`; per candidate: the worst gap over the target's cells).
"""

from __future__ import annotations

import fnmatch
import math
import statistics
from typing import Any

__all__ = [
    "CANDIDATES",
    "OVERLAP",
    "SEEDS",
    "SYNC_EVERY",
    "TARGET_POINTS",
    "cells",
    "choose",
    "diloco_name",
    "markdown",
    "overlap_name",
    "per_period",
    "settings",
    "summarize",
]

SYNC_EVERY = (16, 32, 64)
# (outer learning rate, outer Nesterov momentum). The DiLoCo paper's (0.7, 0.9) was tuned
# for 500 inner steps of AdamW; over 16-64 steps of SGD with momentum, successive outer
# gradients point the same way and Nesterov's steady step lr / (1 - mu) (7x for the paper's)
# overshoots. (1.0, 0.0) is local SGD's plain average (the local_sgd rows); the others step
# lr / (1 - mu) = 2x, 1.43x, 2x, 5x. Their order is their priority (a run stopped by
# --deadline drops the last ones): today's default, then the best of 2 seeds on the 2-core
# machine (2026-11-28; cnn_synthetic at sync_every 32, points above every_step: 0.8/0.6
# +2.5, 1.0/0.3 +1.2, 1.0/0.5 +0.3, 0.5/0.9 -0.7, 0.7/0.9 -2.05).
CANDIDATES = ((0.7, 0.9), (0.8, 0.6), (1.0, 0.3), (1.0, 0.5), (0.5, 0.9))
# What a job's table means beyond its numbers (quality.md prints it under the job).
NOTES = {
    "digits": "1,438 training examples at global batch 64: 22 steps an epoch, and local "
    "modes also average at every epoch's end, so sync_every 32 and 64 average every 22 "
    "steps here (the periods are cnn_synthetic's to judge: 512 steps an epoch). The job "
    "stops far from converged (every_step's training loss about 0.5): a mode that trains "
    "faster per step scores higher.",
}
# `strategy.sync.overlap_steps` of the overlapped rows: diloco at the default outer
# settings, each average applied this many steps after it was sent (its all-reduce beside
# the steps).
OVERLAP = 4
SEEDS = (1, 2, 3, 4, 5)
TARGET_POINTS = 1.0


def settings(candidates: tuple[tuple[float, float], ...] = CANDIDATES) -> dict[str, list[str]]:
    """Setting name -> overrides: every_step, local_sgd and diloco at `SYNC_EVERY`."""
    out: dict[str, list[str]] = {"every_step": []}
    for period in SYNC_EVERY:
        out[f"local_sgd_{period}"] = [
            "strategy.sync.mode=local_sgd",
            f"strategy.sync.sync_every={period}",
        ]
    for period in SYNC_EVERY:
        out[overlap_name(period)] = [
            "strategy.sync.mode=diloco",
            f"strategy.sync.sync_every={period}",
            f"strategy.sync.overlap_steps={OVERLAP}",
        ]
    for lr, mu in candidates:
        for period in SYNC_EVERY:
            out[diloco_name(period, lr, mu)] = [
                "strategy.sync.mode=diloco",
                f"strategy.sync.sync_every={period}",
                f"strategy.sync.outer_learning_rate={lr}",
                f"strategy.sync.outer_momentum={mu}",
            ]
    return out


def diloco_name(period: int, lr: float, mu: float) -> str:
    """The setting name of diloco at `period` with outer (lr, mu): `diloco_32_lr0.7_m0.9`."""
    return f"diloco_{period}_lr{lr:g}_m{mu:g}"


def overlap_name(period: int) -> str:
    """The setting name of diloco at `period`, default outer settings, overlapped by
    `OVERLAP` steps: `diloco_32_overlap4`."""
    return f"diloco_{period}_overlap{OVERLAP}"


def cells(
    jobs: list[str],
    seeds: tuple[int, ...] = SEEDS,
    candidates: tuple[tuple[float, float], ...] = CANDIDATES,
    only: list[str] | None = None,
) -> list[dict[str, Any]]:
    """The fits of the grid in the order they start: a run cut short holds whole cells.

    First `every_step` and `local_sgd` (the references), then one candidate after another
    (`candidates`' order is their priority); within each, the jobs longest first, each
    setting with all its seeds.

    Args:
        jobs: job names (keys of `benchmarks.local_sgd.QUALITY_JOBS`), longest first.
        seeds: `runtime.seed` values. Defaults to `SEEDS`.
        candidates: diloco's (outer learning rate, outer momentum). Defaults to `CANDIDATES`.
        only: fnmatch patterns on `job/setting/seed`; a cell matching none is left out.
            Defaults to `None` (every cell).

    Returns:
        A list of dicts with `key`, `job`, `setting`, `seed` and `overrides` (the setting's).
    """
    every = settings(candidates)
    groups = [["every_step", *(f"local_sgd_{p}" for p in SYNC_EVERY)]]
    groups += [[overlap_name(p) for p in SYNC_EVERY]]
    groups += [[diloco_name(p, lr, mu) for p in SYNC_EVERY] for lr, mu in candidates]
    out = []
    for group in groups:
        for job in jobs:
            for name in group:
                for seed in seeds:
                    key = f"{job}/{name}/{seed}"
                    if only and not any(fnmatch.fnmatchcase(key, p) for p in only):
                        continue
                    row = {"key": key, "job": job, "setting": name, "seed": seed}
                    out.append({**row, "overrides": every[name]})
    return out


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "mean": statistics.mean(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else math.nan,
        "min": min(values),
        "max": max(values),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per job and setting: accuracy statistics and the points below `every_step`.

    Args:
        rows: `quality.jsonl`'s rows; those without `val_accuracy` (a failed or timed-out
            fit) are counted in `failed` only. A key seen twice counts once (the last row).

    Returns:
        `{job: {setting: {n, mean, stdev, min, max, loss, failed, gap, paired_gap,
        paired_stdev}}}`: accuracies in [0, 1]; `gap` is 100 * (every_step's mean - this
        mean), points below `every_step` (positive: worse); `paired_gap` and `paired_stdev`
        the mean and standard deviation over the seeds both have of the same difference.
        The gaps are NaN without an `every_step` row.
    """
    latest = {row["key"]: row for row in rows}
    by_cell: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    failed: dict[tuple[str, str], int] = {}
    for row in latest.values():
        if row.get("val_accuracy") is None:
            failed[row["job"], row["setting"]] = failed.get((row["job"], row["setting"]), 0) + 1
            continue
        by_cell.setdefault(row["job"], {}).setdefault(row["setting"], {})[row["seed"]] = row
    for job, setting in failed:
        by_cell.setdefault(job, {}).setdefault(setting, {})
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for job, by_setting in by_cell.items():
        every = {s: r["val_accuracy"] for s, r in by_setting.get("every_step", {}).items()}
        out[job] = {}
        for setting, by_seed in by_setting.items():
            accuracies = [r["val_accuracy"] for r in by_seed.values()]
            cell: dict[str, Any] = _stats(accuracies) if accuracies else {"n": 0}
            cell["failed"] = failed.get((job, setting), 0)
            losses = [r["loss"] for r in by_seed.values() if r.get("loss") is not None]
            cell["loss"] = statistics.mean(losses) if losses else math.nan
            both = [100 * (every[s] - r["val_accuracy"]) for s, r in by_seed.items() if s in every]
            cell["gap"] = (
                100 * (statistics.mean(every.values()) - cell["mean"])
                if every and accuracies
                else math.nan
            )
            cell["paired_gap"] = statistics.mean(both) if both else math.nan
            cell["paired_stdev"] = statistics.stdev(both) if len(both) > 1 else math.nan
            out[job][setting] = cell
    return out


def choose(
    summary: dict[str, dict[str, dict[str, Any]]],
    candidates: tuple[tuple[float, float], ...] = CANDIDATES,
    seeds: int = len(SEEDS),
) -> list[dict[str, Any]]:
    """Each candidate's worst gap over the target's cells (both jobs, `SYNC_EVERY`), best first.

    `local_sgd` (outer learning rate 1, momentum 0: the plain average) is ranked beside
    them. A candidate `holds` when every cell has `seeds` fits and is at most
    `TARGET_POINTS` below `every_step`.

    Returns:
        A list of dicts: `name`, `lr`, `mu` (None for local_sgd), `gaps` (`{job/period: points}`),
        `worst`, `complete` (every cell with `seeds` fits) and `holds`.
    """
    rows = []
    options: list[tuple[str, float | None, float | None]] = [("local_sgd", None, None)]
    options += [(f"diloco overlap {OVERLAP}", math.nan, math.nan)]
    options += [(f"diloco lr {lr:g} m {mu:g}", lr, mu) for lr, mu in candidates]
    for name, lr, mu in options:
        gaps, complete = {}, True
        for job in sorted(summary):
            for period in SYNC_EVERY:
                if lr is None:
                    setting = f"local_sgd_{period}"
                elif math.isnan(lr):
                    setting = overlap_name(period)
                else:
                    setting = diloco_name(period, lr, mu or 0)
                cell = summary[job].get(setting, {"n": 0, "gap": math.nan})
                gaps[f"{job}/{period}"] = cell["gap"]
                complete = complete and cell["n"] >= seeds
        known = [g for g in gaps.values() if not math.isnan(g)]
        worst = max(known) if known else math.nan
        holds = complete and bool(known) and worst <= TARGET_POINTS
        row = {"name": name, "lr": lr, "mu": mu, "gaps": gaps, "worst": worst}
        rows.append({**row, "complete": complete, "holds": holds})
    return sorted(rows, key=lambda r: math.inf if math.isnan(r["worst"]) else r["worst"])


def per_period(
    summary: dict[str, dict[str, dict[str, Any]]],
    candidates: tuple[tuple[float, float], ...] = CANDIDATES,
) -> dict[int, list[tuple[str, float]]]:
    """Per `sync_every`: each diloco candidate's worst gap over the jobs, best first.

    A rule tied to `sync_every` reads here: which (lr, mu) holds at each period.
    """
    out = {}
    for period in SYNC_EVERY:
        ranked = []
        for lr, mu in candidates:
            name = diloco_name(period, lr, mu)
            gaps = [summary[job].get(name, {}).get("gap", math.nan) for job in summary]
            known = [g for g in gaps if not math.isnan(g)]
            if known and len(known) == len(gaps):
                ranked.append((f"lr {lr:g} m {mu:g}", max(known)))
        out[period] = sorted(ranked, key=lambda r: r[1])
    return out


def _f(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def markdown(
    rows: list[dict[str, Any]], header: list[str] | None = None, seeds: int = len(SEEDS)
) -> str:
    """quality.md: a table per job, then the candidates ranked by their worst gap.

    Args:
        rows: `quality.jsonl`'s rows.
        header: lines under the title. Defaults to `None` (none).
        seeds: fits a cell needs for its candidate to hold. Defaults to `len(SEEDS)`.
    """
    summary = summarize(rows)
    lines = ["# DiLoCo quality grid (issue 53)", "", *(header or [])]
    lines += [
        "Validation accuracy after the job's epochs; points below every_step: 100 x "
        "(every_step's mean - the cell's mean), positive is worse; paired: the same "
        "difference seed by seed, mean ± standard deviation.",
        "",
    ]
    for job, by_setting in summary.items():
        lines += [f"## {job}", ""]
        if job in NOTES:
            lines += [NOTES[job], ""]
        lines.append(
            "| setting | fits | mean | stdev | min | max | points below every_step | "
            "paired | training loss | within 1 point |"
        )
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for setting in sorted(by_setting, key=_setting_order):
            c = by_setting[setting]
            failed = f" ({c['failed']} failed)" if c["failed"] else ""
            if not c["n"]:
                lines.append(f"| {setting} | 0{failed} | - | - | - | - | - | - | - | - |")
                continue
            verdict = "-" if math.isnan(c["gap"]) else "yes" if c["gap"] <= 1.0 else "no"
            lines.append(
                f"| {setting} | {c['n']}{failed} | {c['mean']:.4f} | {_f(c['stdev'], 4)} | "
                f"{c['min']:.4f} | {c['max']:.4f} | {_f(c['gap'])} | {_f(c['paired_gap'])} ± "
                f"{_f(c['paired_stdev'])} | {_f(c['loss'], 4)} | {verdict} |"
            )
        lines.append("")
    ranked = choose(summary, seeds=seeds)
    jobs = sorted(summary)
    columns = [f"{job} {period}" for job in jobs for period in SYNC_EVERY]
    lines += [
        "## Candidates: points below every_step at each sync_every, best worst gap first",
        "",
        f"| setting | {' | '.join(columns)} | worst | holds (<= 1 point, all fits) |",
        "|---|" + "---|" * (len(columns) + 2),
    ]
    for r in ranked:
        gaps = " | ".join(_f(r["gaps"].get(f"{j}/{p}", math.nan)) for j in jobs for p in SYNC_EVERY)
        holds = "yes" if r["holds"] else "no" if r["complete"] else "incomplete"
        lines.append(f"| {r['name']} | {gaps} | {_f(r['worst'])} | {holds} |")
    lines.append("")
    lines += ["## Per sync_every: diloco's worst gap over both jobs, best first", ""]
    for period, order in per_period(summary).items():
        best = ", ".join(f"{name} {_f(worst)}" for name, worst in order) or "-"
        lines.append(f"- sync_every {period}: {best}")
    lines.append("")
    return "\n".join(lines)


def _setting_order(name: str) -> tuple[int, str]:
    return (0 if name == "every_step" else 1 if name.startswith("local") else 2, name)
