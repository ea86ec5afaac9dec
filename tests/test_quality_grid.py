"""The quality grid's plan and summary arithmetic (issue 53): no TensorFlow, under a second."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.quality_cells import (
    CANDIDATES,
    OVERLAP,
    SYNC_EVERY,
    cells,
    choose,
    diloco_name,
    markdown,
    overlap_name,
    per_period,
    settings,
    summarize,
)
from benchmarks.quality_grid import RESULT, _row, _slots


def _rows(job: str, setting: str, accuracies: list[float], loss: float = 0.5) -> list[dict]:
    return [
        {
            "key": f"{job}/{setting}/{seed}",
            "job": job,
            "setting": setting,
            "seed": seed,
            "val_accuracy": accuracy,
            "loss": loss,
        }
        for seed, accuracy in enumerate(accuracies, start=1)
    ]


def test_the_summary_gives_mean_spread_and_points_below_every_step():
    rows = _rows("cnn", "every_step", [0.80, 0.82, 0.84])
    rows += _rows("cnn", "local_sgd_16", [0.79, 0.80, 0.81], loss=0.25)
    cell = summarize(rows)["cnn"]["local_sgd_16"]
    assert cell["n"] == 3
    assert cell["mean"] == pytest.approx(0.80)
    assert cell["stdev"] == pytest.approx(0.01)
    assert (cell["min"], cell["max"]) == (0.79, 0.81)
    assert cell["gap"] == pytest.approx(2.0)  # 100 * (0.82 - 0.80): positive is worse
    assert cell["paired_gap"] == pytest.approx(2.0)  # seed by seed: 1, 2 and 3 points
    assert cell["paired_stdev"] == pytest.approx(1.0)
    assert cell["loss"] == pytest.approx(0.25)
    assert summarize(rows)["cnn"]["every_step"]["gap"] == 0.0


def test_paired_gaps_use_only_seeds_both_settings_have():
    rows = _rows("cnn", "every_step", [0.80, 0.90])  # seeds 1 and 2
    rows += _rows("cnn", "x", [0.70, 0.85, 0.60])  # seed 3 has no every_step
    cell = summarize(rows)["cnn"]["x"]
    assert cell["paired_gap"] == pytest.approx(7.5)  # (10 + 5) / 2
    assert cell["gap"] == pytest.approx(100 * (0.85 - 2.15 / 3))  # means over all seeds


def test_failed_fits_are_counted_apart_and_a_rerun_row_replaces_the_first():
    rows = _rows("cnn", "every_step", [0.8, 0.8])
    rows += [{"key": "cnn/x/1", "job": "cnn", "setting": "x", "seed": 1, "error": "timeout"}]
    rows += [{"key": "cnn/y/1", "job": "cnn", "setting": "y", "seed": 1, "error": "timeout"}]
    rows += _rows("cnn", "y", [0.7])  # the same key, run again: the last row counts
    summary = summarize(rows)
    assert (summary["cnn"]["x"]["n"], summary["cnn"]["x"]["failed"]) == (0, 1)
    assert math.isnan(summary["cnn"]["x"]["gap"])
    assert summary["cnn"]["y"]["n"] == 1 and summary["cnn"]["y"]["failed"] == 0
    assert "| x | 0 (1 failed) |" in markdown(rows)


def test_a_candidate_holds_only_with_every_cell_complete_and_within_one_point():
    lr, mu = CANDIDATES[1]
    rows = []
    for job in ("cnn", "digits"):
        rows += _rows(job, "every_step", [0.8, 0.8])
        for period in SYNC_EVERY:
            rows += _rows(job, f"local_sgd_{period}", [0.8, 0.8])
            rows += _rows(job, diloco_name(period, lr, mu), [0.795, 0.795])  # 0.5 below
            rows += _rows(job, diloco_name(period, *CANDIDATES[0]), [0.78, 0.78])  # 2 below
    ranked = choose(summarize(rows), seeds=2)
    by_name = {r["name"]: r for r in ranked}
    assert ranked[0]["name"] == "local_sgd" and ranked[0]["worst"] == pytest.approx(0.0)
    assert by_name[f"diloco lr {lr:g} m {mu:g}"]["holds"]
    assert by_name[f"diloco lr {lr:g} m {mu:g}"]["worst"] == pytest.approx(0.5)
    lr0, mu0 = CANDIDATES[0]
    assert not by_name[f"diloco lr {lr0:g} m {mu0:g}"]["holds"]
    assert by_name[f"diloco lr {lr0:g} m {mu0:g}"]["worst"] == pytest.approx(2.0)
    incomplete = {r["name"]: r for r in choose(summarize(rows), seeds=3)}
    assert not incomplete[f"diloco lr {lr:g} m {mu:g}"]["holds"]  # 2 seeds of 3
    assert not incomplete[f"diloco lr {lr:g} m {mu:g}"]["complete"]
    periods = per_period(summarize(rows))
    assert periods[16][0] == (f"lr {lr:g} m {mu:g}", pytest.approx(0.5))
    table = markdown(rows, seeds=2)
    row = f"| diloco lr {lr:g} m {mu:g} |" + " 0.50 |" * 7 + " yes |"
    assert row in table


def test_the_plan_starts_with_the_references_and_keeps_each_cells_seeds_together():
    plan = cells(["cnn", "digits"])
    per_job = 1 + len(SYNC_EVERY) * (2 + len(CANDIDATES))
    assert len(plan) == 2 * per_job * 5
    assert len({c["key"] for c in plan}) == len(plan)
    assert [c["key"] for c in plan[:6]] == [f"cnn/every_step/{s}" for s in range(1, 6)] + [
        "cnn/local_sgd_16/1"
    ]
    first_diloco = next(i for i, c in enumerate(plan) if c["setting"].startswith("diloco"))
    assert first_diloco == 2 * (1 + len(SYNC_EVERY)) * 5  # every reference first
    # Then the overlapped rows (the default outer settings), then the candidates.
    assert plan[first_diloco]["setting"] == overlap_name(16)
    assert f"strategy.sync.overlap_steps={OVERLAP}" in plan[first_diloco]["overrides"]
    first_candidate = first_diloco + 2 * len(SYNC_EVERY) * 5
    assert plan[first_candidate]["setting"] == diloco_name(16, *CANDIDATES[0])
    assert plan[-1]["setting"] == diloco_name(64, *CANDIDATES[-1])
    overrides = settings()[diloco_name(32, 1.0, 0.5)]
    assert "strategy.sync.outer_learning_rate=1.0" in overrides
    assert "strategy.sync.outer_momentum=0.5" in overrides
    assert "strategy.sync.sync_every=32" in overrides


def test_only_filters_on_job_setting_and_seed():
    plan = cells(["cnn", "digits"], only=["digits/diloco_32_lr*/[12]", "cnn/every_step/5"])
    assert {c["key"] for c in plan} == {"cnn/every_step/5"} | {
        f"digits/{diloco_name(32, lr, mu)}/{s}" for lr, mu in CANDIDATES for s in (1, 2)
    }


def test_a_childs_result_line_or_its_error_makes_the_row():
    cell = cells(["cnn"], only=["cnn/every_step/1"])[0]
    text = "noise\n" + RESULT + json.dumps({"val_accuracy": 0.75, "loss": 0.6}) + "\nmore\n"
    row = _row(cell, text, 12.0, 2, 0, False)
    assert (row["val_accuracy"], row["loss"], row["seed"]) == (0.75, 0.6, 1)
    assert "error" not in row
    assert _row(cell, "Traceback ...", 3.0, 2, 1, False)["error"] == "Traceback ..."
    assert _row(cell, "", 99.0, 2, -9, True)["error"] == "timeout"


def test_slots_are_disjoint_sets_of_the_cores_this_process_may_use():
    slots = _slots(parallel=64, per_child=1)
    flat = [core for slot in slots for core in slot]
    assert len(flat) == len(set(flat)) and all(len(s) == 1 for s in slots)
    assert len(_slots(parallel=1, per_child=1)) == 1
