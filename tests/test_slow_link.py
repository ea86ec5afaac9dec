"""The slow-link benchmark's model (`benchmarks.slow_link`): bytes and latency waits per mode."""

from __future__ import annotations

import pytest

from benchmarks.slow_link import blocking_waits, bytes_per_step, modelled


def test_every_step_sends_the_weights_every_step_and_the_local_modes_once_a_period():
    assert bytes_per_step("every_step", 13_000_000) == 13_000_000
    assert bytes_per_step("local_sgd_32", 13_000_000) == 13_000_000 / 32
    assert bytes_per_step("diloco_32_overlap4", 3_200) == 100


def test_the_latency_waits_of_an_epoch():
    # 64 steps of 10 ms, 10 ms one way: a blocking collective waits 20 ms more.
    every = blocking_waits("every_step", steps=64, step_seconds=0.01, latency=0.01)
    assert every == pytest.approx(64 * 0.02)
    # Two averages, each an all-reduce and the metric read of its call.
    local = blocking_waits("diloco_32", steps=64, step_seconds=0.01, latency=0.01)
    assert local == pytest.approx(2 * (0.02 + 0.02))
    # Overlapped by 4 steps of 10 ms: the all-reduce's 20 ms are hidden; the read is not.
    hidden = blocking_waits("diloco_32_overlap4", steps=64, step_seconds=0.01, latency=0.01)
    assert hidden == pytest.approx(2 * 0.02)
    # Steps of 2 ms hide 8 of its 20 ms.
    part = blocking_waits("local_sgd_32_overlap4", steps=64, step_seconds=0.002, latency=0.01)
    assert part == pytest.approx(2 * (0.02 + 0.012))


def test_the_modelled_rate_adds_the_waits_to_the_measured_epoch():
    # 64 steps of batch 32 at 2048 examples/s: a 1 s epoch, plus 64 x 20 ms.
    row = {"median_examples_per_sec": 2048.0}
    assert modelled(row, "every_step", steps=64, batch=32, latency=0.01) == pytest.approx(
        2048 / 2.28
    )
