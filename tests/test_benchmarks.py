"""The benchmarks are smoke-run here (CI does not time anything); the profiling hook is tested.

`python -m benchmarks --quick` with one round costs about 20 s on an idle 2-core machine;
the subprocess suites (start-up, local clusters) are `slow`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import REPO, compose, sgd_on_two_replicas

import kdist
from benchmarks import report
from benchmarks.blocks import file_blocks
from benchmarks.defaults import HookTimer
from benchmarks.harness import Case, Target, interleave, summarize
from benchmarks.input_stages import bytes_only, permuted, read_only
from benchmarks.probes import parse
from kdist.callbacks.tensorboard import ProfileSteps, profile_range
from kdist.config.errors import ConfigError
from kdist.data.tfrecord_source import tfrecord
from kdist.data.tfrecords import READ_BATCH, write_tfrecords

SIDE_KEYS = {"name", "median", "min", "max", "best", "samples"}
ROW_KEYS = {
    "id",
    "group",
    "title",
    "unit",
    "lower_is_better",
    "a",
    "b",
    "ratio",
    "target",
    "met",
    "rounds",
    "load",
    "details",
    "note",
}


def _bench(args: list[str], tmp_path: Path, timeout: float) -> dict:
    out = tmp_path / "out"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args, "--out", str(out), "--quiet"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "targets met" in done.stdout
    assert (out / "results.md").read_text().startswith("# kdist benchmarks")
    return json.loads((out / "results.json").read_text())


def test_quick_mode_writes_json_and_markdown(tmp_path: Path):
    results = _bench(["--quick", "--rounds", "1", "--workdir", str(tmp_path / "w")], tmp_path, 300)
    assert results["mode"] == "quick"
    assert {"cpu", "cores", "tensorflow", "keras", "load_average"} <= set(results["machine"])
    ids = {row["id"] for row in results["comparisons"]}
    assert {
        "loop/one_device_mlp_k1",
        "fit/one_device_mlp_k1",
        "strategy/mirrored1_vs_none_mlp_k32",
        "overhead/minimal_ms_per_epoch",
        "overhead/minimal_share",
        "input/mlp_k32_files",
        "input/mlp_k32_files_records",
        "input/mlp_k32_blocks",
        "input/mlp_k32_blocks_read",
        "input/mlp_k32_blocks_checked",
        "input/stages_files",
        "input/stages_read_only",
        "input/stages_bytes_only",
        "input/stages_permuted",
        "defaults/default_vs_loop",
        "defaults/user_run_vs_loop",
        "defaults/default_vs_minimal",
        "defaults/default_share",
    } <= ids
    for row in results["comparisons"]:
        assert set(row) == ROW_KEYS, row["id"]
        assert set(row["a"]) == SIDE_KEYS
        assert row["a"]["median"] > 0 and row["rounds"] == 1
        if row["b"] is not None:
            keys = {"median", "of_medians", "of_best"}
            assert keys <= set(row["ratio"]) <= {*keys, "cpu_median"}
            if row["id"].startswith(("loop/", "fit/", "strategy/")):
                assert row["ratio"]["cpu_median"] > 0  # CPU time of the in-process rounds
        if row["target"] is not None:
            assert isinstance(row["met"], bool)
    assert results["suites"]["cluster"].startswith("skipped")
    assert results["suites"]["cluster_loops"].startswith("on request")
    assert results["summary"]["targets"] == sum(
        r["met"] is not None for r in results["comparisons"]
    )
    markdown = (tmp_path / "out" / "results.md").read_text()
    for heading in ("## 1. ", "## 2. ", "## 3. ", "## 4. ", "## 5. ", "## 7. ", "Machine:"):
        assert heading in markdown


def test_isolate_runs_each_suite_in_a_process_of_its_own(tmp_path: Path):
    # A full run measures every suite in a fresh process (`--isolate` does it in quick
    # mode too): the rows come back from the suite's own results.json.
    work = tmp_path / "w"
    args = ["--quick", "--isolate", "--only", "overhead", "--rounds", "1", "--workdir", str(work)]
    results = _bench(args, tmp_path, 300)
    assert [name for name, state in results["suites"].items() if state == "done"] == ["overhead"]
    own = json.loads((work / "suite-overhead" / "out" / "results.json").read_text())
    assert [r["id"] for r in results["comparisons"]] == [r["id"] for r in own["comparisons"]]
    assert {"overhead/minimal_ms_per_epoch", "overhead/minimal_share"} <= {
        r["id"] for r in own["comparisons"]
    }


@pytest.mark.slow
def test_startup_suite_runs_both_commands(tmp_path: Path):
    results = _bench(["--only", "startup", "--rounds", "1"], tmp_path, 600)
    rows = {row["id"]: row for row in results["comparisons"]}
    row = rows["startup/kdist_train_vs_plain_script"]
    assert row["a"]["name"] == "python -m kdist.train"
    assert 0 < row["a"]["median"] < 300 and 0 < row["b"]["median"] < 300
    # The help rows: each help command over `kdist --version`, the train help with its target.
    helps = {name: rows[name] for name in rows if "help" in name}
    assert set(helps) == {
        "startup/train_help_vs_version",
        "startup/tune_help_vs_version",
        "startup/train_help_hydra_get_help_vs_version",
    }
    assert helps["startup/train_help_vs_version"]["target"] is not None
    for help_row in helps.values():
        assert help_row["b"]["name"] == "kdist --version"
        assert 0 < help_row["a"]["median"] < 300 and help_row["ratio"]["median"] > 0


@pytest.mark.slow
def test_threads_suite_runs_both_sides_in_their_own_processes(tmp_path: Path):
    results = _bench(["--only", "threads", "--rounds", "1"], tmp_path, 600)
    rows = {row["id"]: row for row in results["comparisons"]}
    assert set(rows) == {"threads/mlp_k32_intra1", "threads/cnn_k1_intra1"}
    for row in rows.values():
        assert row["a"]["name"] == "intra_op_threads=1"
        assert 0 < row["a"]["median"] < 1000 and 0 < row["b"]["median"] < 1000  # ms per step


@pytest.mark.slow
@pytest.mark.multiworker
def test_cluster_suite_measures_both_clusters(tmp_path: Path):
    results = _bench(["--only", "cluster", "--rounds", "1"], tmp_path, 1200)
    rows = {row["id"]: row for row in results["comparisons"]}
    assert set(rows) == {"cluster/mwms2_vs_one_process", "cluster/ps_vs_one_process"}
    for row in rows.values():
        assert row["unit"] == "examples/s" and row["a"]["median"] > 0


def test_interleave_alternates_the_order_and_ratios_are_per_round():
    calls: list[str] = []
    values = {"a": iter([2.0, 4.0, 6.0]), "b": iter([1.0, 1.0, 2.0])}

    def side(name: str):
        def run() -> float:
            calls.append(name)
            return next(values[name])

        return run

    samples = interleave([Case("a", side("a")), Case("b", side("b"))], rounds=2, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a"]
    assert samples == {"a": [4.0, 6.0], "b": [1.0, 2.0]}
    row = summarize(
        id="x",
        group="g",
        title="t",
        samples=samples,
        a="a",
        b="b",
        unit="s",
        target=Target("<=", 3.5),
    )
    assert row.ratio == {"median": 3.5, "of_medians": 5.0 / 1.5, "of_best": 4.0}
    assert row.met is True
    throughput = summarize(
        id="y",
        group="g",
        title="t",
        samples=samples,
        a="a",
        b=None,
        unit="x/s",
        lower_is_better=False,
        target=Target(">=", 6.0),
    )
    assert throughput.a["best"] == 6.0 and throughput.met is False


class _Slow(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        time.sleep(0.02)


def test_hook_timer_times_each_hook_of_the_lists_made_while_active(tmp_path: Path):
    path = tmp_path / "history.csv"
    timer = HookTimer()
    with timer.active():
        callbacks = keras.callbacks.CallbackList([_Slow(), keras.callbacks.CSVLogger(str(path))])
    after = keras.callbacks.CallbackList([_Slow()])
    callbacks.on_train_begin()
    for epoch in range(3):
        callbacks.on_epoch_end(epoch, {})
    callbacks.on_train_end()
    after.on_epoch_end(0, {})  # made after: not timed
    assert timer.calls["_Slow.on_epoch_end"] == 3
    assert timer.calls["CSVLogger.on_epoch_end"] == 3
    assert 0.06 <= timer.seconds["_Slow.on_epoch_end"] < 1.0
    parts = timer.breakdown(wall=1.0, inside=0.5)
    assert parts["outside the step calls"] == 500.0
    assert parts["callback hooks"] == pytest.approx(sum(timer.seconds.values()) * 1000, abs=0.02)
    assert list(parts)[5] == "_Slow.on_epoch_end (3x)"  # the costliest hook first
    (line, _) = report._breakdown([{"details": {"outside_breakdown_ms": parts}}])
    assert "; _Slow.on_epoch_end (3x) 6" in line  # rendered under the group's table


def test_file_blocks_hand_out_the_arrays_in_interleaved_per_file_blocks():
    # Comparison 4's floor for a reader of per-file blocks: the whole-file reader's order.
    per_file = 2 * READ_BATCH
    source = file_blocks(blocks=4, num_train=4 * per_file, num_validation=0, input_shape=[3])
    x, y = source.arrays("train")
    got = list(source.dataset("train").as_numpy_iterator())
    order = [
        f * per_file + b * READ_BATCH + i
        for b in range(2)
        for f in range(4)
        for i in range(READ_BATCH)
    ]
    assert np.array_equal(np.stack([e[0] for e in got]), x[order])
    assert np.array_equal(np.array([e[1] for e in got]), y[order])
    with pytest.raises(ValueError, match="do not cut into 4 blocks"):
        file_blocks(num_train=10, num_validation=0).dataset("train")


def test_file_blocks_read_and_checksum_their_files_on_every_pass(tmp_path: Path):
    # Comparison 4's floors for a reader that reads (and checks) the files every pass: the
    # examples are the arrays', and the bytes are really read (not pruned away).
    per_file = READ_BATCH
    kwargs = {"num_train": 4 * per_file, "num_validation": 0, "input_shape": [3]}
    plain = file_blocks(**kwargs)
    x, y = plain.arrays("train")
    write_tfrecords(tmp_path / "d", {"train": (x, y)}, num_shards=4, num_classes=10)
    expected = list(plain.dataset("train").as_numpy_iterator())
    for checksum in (False, True):
        source = file_blocks(read_path=str(tmp_path / "d"), checksum=checksum, **kwargs)
        got = list(source.dataset("train").repeat(2).as_numpy_iterator())
        assert len(got) == 2 * len(expected)
        for (gx, gy), (ex, ey) in zip(got, expected + expected, strict=True):
            assert np.array_equal(gx, ex) and gy == ey
    # A missing file fails the read; a changed one fails the checksum (and only then).
    victim = tmp_path / "d" / "train-00002-of-00004.tfrecord"
    data = bytearray(victim.read_bytes())
    data[40] ^= 0xFF
    victim.write_bytes(bytes(data))
    assert len(list(file_blocks(read_path=str(tmp_path / "d"), **kwargs).dataset("train"))) == (
        4 * per_file
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="checksum"):
        list(file_blocks(read_path=str(tmp_path / "d"), checksum=True, **kwargs).dataset("train"))
    victim.unlink()
    with pytest.raises(tf.errors.NotFoundError):
        list(file_blocks(read_path=str(tmp_path / "d"), **kwargs).dataset("train"))


def test_the_stage_rows_readers_hand_out_every_example_of_the_files(tmp_path: Path):
    # input/stages_*: the reader's work alone, and a reader with one permutation a pass.
    x = np.arange(4 * 48 * 3, dtype=np.float32).reshape(4 * 48, 3)
    y = np.arange(4 * 48, dtype=np.int64) % 10
    write_tfrecords(tmp_path / "d", {"train": (x, y)}, num_shards=4, num_classes=10)
    reader = tfrecord(path=str(tmp_path / "d"))
    blocks = list(read_only(reader).as_numpy_iterator())
    assert [len(b[0]) for b in blocks] == [48] * 4
    assert np.array_equal(np.concatenate([b[0] for b in blocks]), x)
    files = list(bytes_only(reader).as_numpy_iterator())
    assert [len(f) for f in files] == [Path(p).stat().st_size for p in reader.split_files("train")]
    batches = list(permuted(reader, 16, seed=7).take(2 * 12).as_numpy_iterator())
    assert all(b[0].shape == (16, 3) and b[1].shape == (16,) for b in batches)
    passes = [np.concatenate([b[0] for b in batches[i : i + 12]]) for i in (0, 12)]
    for seen in passes:
        # Every example once a pass, with its label.
        assert np.array_equal(seen[np.argsort(seen[:, 0])], x)
    labels = np.concatenate([b[1] for b in batches[:12]])
    assert np.array_equal(labels, y[(passes[0][:, 0] // 3).astype(int)])
    assert not np.array_equal(passes[0], x) and not np.array_equal(passes[0], passes[1])
    with pytest.raises(ValueError, match="do not divide into batches of 20"):
        permuted(reader, 20, seed=7)


def test_probe_lines_are_parsed_per_task():
    text = (
        "[worker 0] kdist-bench epoch index=1 seconds=2.5 steps=16 batch=128\n"
        "[worker 1] kdist-bench epoch index=1 seconds=9.0 steps=16 batch=128\n"
        "[worker 0] other output\n"
    )
    assert parse(text, prefix="[worker 0]") == [
        ("epoch", {"index": "1", "seconds": "2.5", "steps": "16", "batch": "128"})
    ]


@pytest.mark.parametrize("strategy", ["one_device", "mirrored"])
def test_profile_steps_writes_a_tensorboard_profile(strategy, tmp_path: Path):
    run_dir = tmp_path / "run"
    cfg = compose(
        [
            f"strategy={strategy}",
            "trainer=fast_dev",
            "trainer.verbose=0",
            "callbacks=minimal",
            "callbacks.tensorboard.profile_steps=[2,3]",
            f"run_dir={run_dir}",
        ]
    )
    kdist.Experiment(cfg).fit()
    profiles = list(
        (run_dir / "tensorboard" / "train" / "plugins" / "profile").glob("*/*.xplane.pb")
    )
    assert len(profiles) == 1 and profiles[0].stat().st_size > 0


@pytest.mark.parametrize(
    ("steps_per_call", "first", "last", "profiled"),
    [(1, 2, 3, [2, 3]), (8, 10, 20, [2, 3]), (8, 1, 1, [1]), (4, 30, 40, [])],
)
def test_profile_steps_covers_the_calls_that_run_the_steps(
    steps_per_call, first, last, profiled, monkeypatch
):
    """Which calls (1-based) run under the profiler, with 4 calls of `steps_per_call` steps."""

    class Profiler(ProfileSteps):
        def __init__(self):
            super().__init__(log_dir="unused", first=first, last=last)
            self.steps = 0
            self.calls: list[int] = []
            self.call = 0

        def _steps_done(self) -> int:
            return self.steps

        def on_train_batch_begin(self, batch, logs=None):
            self.call += 1
            super().on_train_batch_begin(batch, logs)
            if self._active:
                self.calls.append(self.call)

    import tensorflow as tf

    profiler = Profiler()
    started, stopped = [], []
    monkeypatch.setattr(tf.profiler.experimental, "start", lambda logdir: started.append(logdir))
    monkeypatch.setattr(tf.profiler.experimental, "stop", lambda: stopped.append(True))
    profiler.on_train_begin()
    for _ in range(4):
        profiler.on_train_batch_begin(0)
        profiler.steps += steps_per_call
        profiler.on_train_batch_end(0)
    profiler.on_train_end()
    assert profiler.calls == profiled
    assert len(started) == len(stopped) == (1 if profiled else 0)


def test_profile_steps_rejects_a_bad_range():
    assert profile_range(None) is None
    assert profile_range([5, 5]) == (5, 5)
    for bad in ([3, 2], [0, 4], [7], [1, 2, 3]):
        with pytest.raises(ConfigError, match=r"callbacks\.tensorboard\.profile_steps"):
            profile_range(bad)


def test_profile_steps_only_profiles_on_the_chief(monkeypatch):
    """Other tasks' profiles would be thrown away (and two profiling processes crashed)."""
    import tensorflow as tf

    from kdist.callbacks import tensorboard

    monkeypatch.setattr(tensorboard.chief, "is_chief", lambda strategy=None: False)
    started = []
    monkeypatch.setattr(tf.profiler.experimental, "start", lambda logdir: started.append(logdir))
    profiler = ProfileSteps(log_dir="unused", first=1, last=2)
    profiler._steps_done = lambda: 0  # no model needed
    profiler.on_train_begin()
    profiler.on_train_batch_begin(0)
    assert started == []


def test_scaling_suite_is_on_request_and_over_perfect_scaling_is_the_excess_step_time():
    from benchmarks import run as bench_run
    from benchmarks.scaling import _over_perfect_ms

    assert "scaling" in bench_run.ON_REQUEST and "scaling" in bench_run.SUBPROCESS_SUITES
    # One process: 1,000 examples/s at batch 100 (100 ms a step); 2 workers would take
    # 50 ms a step if perfect; at 800 examples/s they take 125 ms: 75 ms over.
    assert _over_perfect_ms(800.0, 1000.0, 2, 100) == pytest.approx(75.0)


@pytest.mark.slow
def test_scaling_suite_sparse_updates_row_measures_both_optimizers(tmp_path: Path):
    from benchmarks.context import Context
    from benchmarks.scaling import _sparse_updates

    (row,) = _sparse_updates(Context(quick=True, rounds=1, workdir=tmp_path, verbose=False))
    data = row.to_json()
    assert data["id"] == "scaling/lazy_adam_step" and data["unit"] == "ms/step"
    assert data["a"]["median"] > 0 and data["b"]["median"] > 0
    assert data["ratio"]["median"] < 1.0  # row-sparse is faster, whatever the load


def test_the_curves_control_moves_each_gradient_element_differently_at_every_step():
    """Adam divides each element by its own running scale, so a fixed factor would leave
    its steps unchanged: the control must move elements by different, fresh amounts."""
    from benchmarks.scaling import _perturb_all_reduce

    grads = np.random.default_rng(0).normal(size=(2, 50)).astype(np.float32)
    values = sgd_on_two_replicas(grads, lambda opt, _: _perturb_all_reduce(opt, 1e-3), steps=2)
    applied = [-values[0], values[0] - values[1]]
    exact = grads.sum(axis=0)
    for summed in applied:
        # each replica's element moved by at most 1e-3 of itself
        assert np.all(np.abs(summed - exact) <= 1e-3 * np.abs(grads).sum(axis=0) + 1e-6)
        factors = summed / exact
        assert np.ptp(factors) > 1e-4  # not one factor for every element
    assert np.abs(applied[0] - applied[1]).max() > 1e-6  # drawn again at the next step
