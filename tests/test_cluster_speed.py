"""kdist.launch: a local cluster's chief prints, once, what one process must beat."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest

from kdist.callbacks.progress import ClusterSpeed
from kdist.cluster import resolve
from kdist.config.constants import LOCAL_CLUSTER_ENV
from kdist.launcher.tasks import plan_tasks


def test_the_launcher_tells_every_task_the_shape_of_its_cluster(tmp_path: Path):
    for workers, ps in ((2, 0), (2, 1)):
        tasks = plan_tasks(
            workers=workers,
            ps=ps,
            module="kdist.train",
            overrides=[],
            host="127.0.0.1",
            run_dir=tmp_path,
            base_env={"PATH": "/bin"},
        )
        assert {t.env[LOCAL_CLUSTER_ENV] for t in tasks} == {f"{workers},{ps}"}


def test_the_cluster_says_when_kdist_launch_started_it():
    tf_config = '{"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}, '
    tf_config += '"task": {"type": "worker", "index": 0}}'
    assert resolve({"TF_CONFIG": tf_config}).launched is None  # not under kdist.launch
    launched = resolve({"TF_CONFIG": tf_config, LOCAL_CLUSTER_ENV: "2,1"})
    assert launched.launched == (2, 1)
    for junk in ("junk", "0,0", "2", "2,-1"):
        assert resolve({"TF_CONFIG": tf_config, LOCAL_CLUSTER_ENV: junk}).launched is None
    assert resolve({LOCAL_CLUSTER_ENV: "2,1"}).launched is None  # no cluster: one process
    with pytest.raises(ValueError, match="workers"):
        ClusterSpeed(examples_per_step=64, workers=0)


def test_prints_once_after_the_first_timed_epoch(capsys):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    speed = ClusterSpeed(examples_per_step=8, workers=2, ps=1)
    x, y = np.ones((32, 3), np.float32), np.ones((32, 1), np.float32)
    model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[speed])
    lines = [line for line in capsys.readouterr().out.splitlines() if "kdist.launch" in line]
    assert len(lines) == 1, lines
    assert "(2 worker(s) + 1 ps)" in lines[0] and "in epoch 2" in lines[0]
    assert "one process on this machine beats it above" in lines[0]
    rate = float(lines[0].split(" trained ")[1].split(" examples/s")[0].replace(",", ""))
    assert rate > 0
