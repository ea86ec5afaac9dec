"""Helpers shared by the tests.

In-process tests split the CPU into 2 logical devices once per session (TensorFlow allows
that only before it initialises), so one_device and mirrored tests can run in the same
process; every in-process config therefore sets runtime.logical_devices=2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[1]
LOGICAL = "runtime.logical_devices=2"
# A six-step job on small synthetic data (an MLP on 16 features), for cases that only need
# training to run: precision, XLA, config checks, under any strategy.
SMALL_JOB = [
    "model=mlp",
    "model.units=[32]",
    "data=synthetic",
    "data.source.input_shape=[16]",
    "data.source.num_train=256",
    "data.source.num_validation=64",
    "trainer.epochs=1",
    "trainer.steps_per_epoch=6",
    "trainer.steps_per_execution=3",
    "trainer.global_batch_size=32",
    "trainer.verbose=0",
    "callbacks=minimal",
]


def sync_job(*, steps_per_epoch: int, steps_per_execution: int) -> list[str]:
    """The local SGD cases' job: 2 epochs of an MLP's steps on 4-class synthetic data with
    16 features (512 examples at global batch 32), seed 3; no strategy or model given."""
    return [
        "data=synthetic",
        "data.source.input_shape=[16]",
        "data.source.num_train=512",
        "data.source.num_validation=64",
        "data.source.num_classes=4",
        "trainer.epochs=2",
        f"trainer.steps_per_epoch={steps_per_epoch}",
        "trainer.global_batch_size=32",
        f"trainer.steps_per_execution={steps_per_execution}",
        "trainer.verbose=0",
        "callbacks=minimal",
        "runtime.seed=3",
    ]


def compose(overrides: Sequence[str] = (), **kwargs):
    """`kdist.compose` with the session's logical-device split added."""
    import kdist

    return kdist.compose([LOGICAL, *overrides], **kwargs)


def sgd_on_two_replicas(grads, install, steps: int = 1) -> list:
    """`steps` SGD updates (learning rate 1) of one variable by two mirrored replicas,
    replica i giving `grads[i]`, summed by the optimizer's all-reduce after
    `install(optimizer, variable)` (called in the strategy's scope) has set it up: the
    variable's value after each step, starting from zeros."""
    import keras
    import numpy as np
    import tensorflow as tf

    from kdist.strategies import mirrored

    strategy = mirrored(devices=["/cpu:0", "/cpu:1"])
    with strategy.scope():
        variable = keras.Variable(np.zeros(grads.shape[1:], np.float32))
        optimizer = keras.optimizers.SGD(learning_rate=1.0)
        optimizer.build([variable])
        install(optimizer, variable)

    @tf.function
    def step():
        def replica_fn():
            index = tf.distribute.get_replica_context().replica_id_in_sync_group
            optimizer.apply_gradients([(tf.gather(tf.constant(grads), index), variable)])

        strategy.run(replica_fn)

    values = []
    for _ in range(steps):
        step()
        values.append(variable.numpy())
    return values


def run_module(
    module: str, args: Sequence[str], *, cwd: Path, timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run `python -m module args` in `cwd`; bounded by `timeout` seconds."""
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    if env and "PYTHONPATH" in env and os.environ.get("PYTHONPATH"):
        # Keep the caller's path (e.g. a worktree's kdist before the installed one).
        full_env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], os.environ["PYTHONPATH"]])
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def only_run_dir(root: Path) -> Path:
    """The single run directory Hydra made under `root/outputs`."""
    runs = [p for p in (root / "outputs").glob("*/*") if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def tiny_model(*, input_shape, num_classes, width: int = 16):
    """A user model callable for `model=custom` tests."""
    import keras

    inputs = keras.Input(shape=tuple(input_shape))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(width, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x))


def norm_model(*, input_shape, num_classes, width: int = 16):
    """A `model=custom` callable with batch normalization: its moving statistics are
    weights that the training loss never reads."""
    import keras

    inputs = keras.Input(shape=tuple(input_shape))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(width, activation="relu")(x)
    x = keras.layers.BatchNormalization()(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x))


def not_a_model(*, input_shape, num_classes):
    """Returns the wrong type, for the factory's error."""
    return "model"


def make_recorder():
    """A Keras callback that records every hook call as (hook, index)."""
    import keras

    class Recorder(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.calls: list[tuple[str, int | None]] = []
            self.epoch_logs: list[dict] = []

        def on_train_begin(self, logs=None):
            self.calls.append(("train_begin", None))

        def on_train_end(self, logs=None):
            self.calls.append(("train_end", None))

        def on_epoch_begin(self, epoch, logs=None):
            self.calls.append(("epoch_begin", epoch))

        def on_epoch_end(self, epoch, logs=None):
            self.calls.append(("epoch_end", epoch))
            self.epoch_logs.append(dict(logs or {}))

        def on_train_batch_begin(self, batch, logs=None):
            self.calls.append(("batch_begin", batch))

        def on_train_batch_end(self, batch, logs=None):
            self.calls.append(("batch_end", batch))

        def on_test_begin(self, logs=None):
            self.calls.append(("test_begin", None))

        def on_test_end(self, logs=None):
            self.calls.append(("test_end", None))

        def count(self, hook: str) -> int:
            return sum(1 for name, _ in self.calls if name == hook)

    return Recorder()


class StopAfterEpoch:
    """Factory target for `callbacks.extra`: a callback that stops after epoch `epoch`."""

    def __new__(cls, *, epoch: int = 0):
        import keras

        class _Stop(keras.callbacks.Callback):
            def on_epoch_end(self, index, logs=None):
                if index >= epoch:
                    self.model.stop_training = True

        return _Stop()


def crash_at_step(exp, step: int) -> None:
    """Fit `exp` until a callback raises once `step` optimizer steps are done (a crash in
    a notebook); the `RuntimeError` it raises is expected."""
    import keras
    import pytest

    class Fail(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(exp.optimizer.iterations.numpy()) >= step:
                raise RuntimeError(f"failed at step {step}")

    with pytest.raises(RuntimeError, match=f"failed at step {step}"):
        exp.fit(callbacks=[Fail()])


class KillAtStep:
    """`callbacks.extra` target: SIGKILL this process once `step` optimizer steps are done.

    With `once_file`, it fires only if that file does not exist yet (and creates it), so a
    restarted run is not killed again; with `only_worker`, only that TF_CONFIG index fires.
    With `parent=True` it kills its parent process (under `kdist.launch`, the launcher).
    """

    def __new__(
        cls,
        *,
        step: int,
        signal_name: str = "SIGKILL",
        once_file: str | None = None,
        only_worker: int | None = None,
        parent: bool = False,
    ):
        import json
        import signal

        import keras

        class _Kill(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if int(self.model.optimizer.iterations.numpy()) < step:
                    return
                if only_worker is not None:
                    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
                    if task.get("index") != only_worker:
                        return
                if once_file is not None:
                    if os.path.exists(once_file):
                        return
                    Path(once_file).write_text("fired")
                os.kill(os.getppid() if parent else os.getpid(), getattr(signal, signal_name))

        return _Kill()


class KillDuringAsyncSave:
    """`callbacks.extra` target: SIGKILL this process while the backup of `step` is written.

    It wraps kdist's writer (`HostWriter.write`, on the writer thread): the write of the
    backup `ckpt-<step>` starts as TensorFlow's does, with its temporary folder
    (`ckpt-<step>_temp`) and a shard in it, and the process is killed there, so the kill
    always falls inside the write. (It polled for TensorFlow's own temporary folder from
    the training thread before: on a loaded machine the write had ended by the time the
    poll began.) It writes what it saw to `report` first.
    """

    def __new__(cls, *, step: int, report: str):
        import signal

        import keras

        from kdist.engine.checkpoint import writer

        original = writer.HostWriter.write

        def write(self, prefix):
            path = Path(prefix)
            if path.name != f"ckpt-{step}" or path.parent.name != "backup":
                return original(self, prefix)
            temporary = path.parent / f"{path.name}_temp"
            temporary.mkdir()
            (temporary / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"\0" * 64)
            complete = (path.parent / f"{path.name}.index").exists()
            Path(report).write_text(f"temp, index {'written' if complete else 'missing'}")
            os.kill(os.getpid(), signal.SIGKILL)

        writer.HostWriter.write = write
        return keras.callbacks.Callback()


class InjectNaN:
    """`callbacks.extra` target: poison weights with NaN once `step` steps are done.

    It fires once, at the first batch end that finds at least `step` steps done (exactly
    `step` with one step per call; under a parameter server, whose calls run several
    steps and whose step counter the chief reads late, the first end after it).

    By default it poisons the trainable variables of the model's last layer that has any
    (the logits' kernel and bias), so the loss is NaN from the next step on, on every
    machine. Poisoning the first kernel instead is not enough: in the MLP it sits under a
    ReLU, and oneDNN's fused MatMul+BiasAdd+Relu (TensorFlow's default on many x86 CPUs)
    gives 0 for NaN, so the loss can stay finite while the weights are NaN. With `path`,
    it poisons every variable whose path contains it instead (e.g. `"moving_mean"`, which
    the training loss never reads).
    """

    def __new__(cls, *, step: int, path: str | None = None):
        import keras
        import numpy as np

        def poisoned(model) -> list:
            if path is not None:
                found = [w for w in model.weights if path in w.path]
                assert found, f"no variable path contains {path!r}"
                return found
            owners = [layer for layer in model.layers if layer.trainable_weights]
            return list(owners[-1].trainable_weights)

        class _Inject(keras.callbacks.Callback):
            def __init__(self) -> None:
                super().__init__()
                self.done = False

            def on_train_batch_end(self, batch, logs=None):
                if self.done or int(self.model.optimizer.iterations.numpy()) < step:
                    return
                self.done = True
                for weight in poisoned(self.model):
                    weight.assign(np.full(weight.shape, np.nan, dtype=weight.dtype))

        return _Inject()


class StopAtStep:
    """`callbacks.extra` target: ask training to stop once `step` steps are done."""

    def __new__(cls, *, step: int):
        import keras

        class _Stop(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if int(self.model.optimizer.iterations.numpy()) >= step:
                    self.model.stop_training = True

        return _Stop()


def flaky_model(*, input_shape, num_classes, mode: str = "ok", width: int = 16):
    """A `model=custom` callable for tuning tests: `mode` ok, diverge (NaN outputs) or error."""
    import keras

    if mode == "error":
        raise ValueError(f"flaky_model cannot build mode={mode!r}")
    inputs = keras.Input(shape=tuple(input_shape))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(width, activation="relu")(x)
    outputs = keras.layers.Dense(num_classes)(x)
    if mode == "diverge":
        outputs = keras.layers.Lambda(lambda t: t * float("nan"))(outputs)
    return keras.Model(inputs, outputs)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# --- small generated data sets for the file-based `data` options (issue 7) -------------


def learnable_arrays(count: int, *, shape=(8,), classes: int = 3, seed: int = 0):
    """`(x, y)`: float32 features and labels that are the argmax of a fixed linear map."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((count, *shape)).astype(np.float32)
    weights = np.random.default_rng(1000).standard_normal((int(np.prod(shape)), classes))
    y = np.argmax(x.reshape(count, -1) @ weights, axis=1).astype(np.int64)
    return x, y


def write_class_images(root: Path, *, per_class: int = 40, size: int = 8, classes: int = 3):
    """PNG images in `root/<class>/`: class c has a bright channel c, plus noise."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    for c in range(classes):
        folder = root / f"class_{c}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            image = rng.integers(0, 80, (size, size, 3)).astype(np.uint8)
            image[..., c % 3] += 150
            (folder / f"{i:03d}.png").write_bytes(tf.io.encode_png(image).numpy())
    return root


def write_fake_mnist(cache_dir: Path, *, train: int = 600, test: int = 120) -> Path:
    """A small `mnist.npz` in Keras's layout: uint8 28x28 images, a bright block per class."""
    import numpy as np

    rng = np.random.default_rng(0)

    def images(count):
        y = rng.integers(0, 10, count).astype(np.uint8)
        x = rng.integers(0, 60, (count, 28, 28)).astype(np.uint8)
        for i, label in enumerate(y):
            row, col = divmod(int(label), 5)
            x[i, row * 14 : row * 14 + 14, col * 5 : col * 5 + 5] += 180
        return x, y

    (x_train, y_train), (x_test, y_test) = images(train), images(test)
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / "mnist.npz"
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def write_csv(path: Path, x, y, *, label_names=None) -> Path:
    """A CSV file with columns f0..fN and `label` (class ids, or `label_names[id]`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = [f"f{i}" for i in range(x.shape[1])] + ["label"]
    lines = [",".join(header)]
    for row, label in zip(x, y, strict=True):
        shown = label_names[int(label)] if label_names else str(int(label))
        lines.append(",".join(f"{v:.6f}" for v in row) + "," + shown)
    path.write_text("\n".join(lines) + "\n")
    return path


def build_tiny_tfds(data_dir: Path, *, train: int = 600, test: int = 120) -> str:
    """Prepare a small TFDS dataset under `data_dir` with no download; returns its name.

    The builder is not registered: kdist then reads the prepared files as a user's
    machine would, without the dataset's code.
    """
    import numpy as np
    import tensorflow_datasets as tfds

    class KdistTinyVectors(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self,
                features=tfds.features.FeaturesDict(
                    {
                        "image": tfds.features.Tensor(shape=(8,), dtype=np.float32),
                        "label": tfds.features.ClassLabel(num_classes=3),
                    }
                ),
            )

        def _split_generators(self, dl_manager):
            return {
                "train": self._generate_examples(train, 0),
                "test": self._generate_examples(test, 1),
            }

        def _generate_examples(self, count, seed):
            x, y = learnable_arrays(count, seed=seed)
            for i in range(count):
                yield i, {"image": x[i], "label": int(y[i])}

    builder = KdistTinyVectors(data_dir=str(data_dir))
    builder.download_and_prepare()
    return builder.name


def option_overrides(group: str, option: str, root: Path) -> list[str]:
    """Overrides (and small files under `root`) with which `group=option` builds in a test.

    File-based data options get generated files; models that need particular data get it.
    """
    from kdist.data.tfrecords import write_tfrecords

    if group == "model" and option == "transformer":
        return ["data=synthetic_text", "data.source.num_train=256", "data.source.num_validation=64"]
    if group == "model" and option == "wide_deep":
        return ["data=categorical", "data.source.num_train=512", "data.source.num_validation=128"]
    if group != "data":
        return []
    x, y = learnable_arrays(320, shape=(8, 8, 1))
    if option == "npz":
        import numpy as np

        np.savez(root / "data.npz", x=x, y=y)
        return [f"data.source.path={root / 'data.npz'}"]
    if option == "tfrecord":
        splits = {"train": (x[:256], y[:256]), "validation": (x[256:], y[256:])}
        write_tfrecords(root / "tfrecord", splits)
        return [f"data.source.path={root / 'tfrecord'}"]
    if option == "image_dir":
        write_class_images(root / "images", per_class=30)
        return [f"data.source.path={root / 'images'}"]
    if option == "csv":
        write_csv(root / "data.csv", x.reshape(len(x), -1), y)
        return [f"data.source.path={root / 'data.csv'}"]
    if option == "keras":
        write_fake_mnist(root / "keras", train=128, test=32)
        return [f"data.source.cache_dir={root / 'keras'}"]
    if option == "tfds":
        name = build_tiny_tfds(root / "tfds", train=128, test=32)
        return [f"data.source.name={name}", f"data.source.data_dir={root / 'tfds'}"]
    return []


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie, exited but not yet waited for, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def launch_pids(text: str) -> dict[str, int]:
    """Task name -> pid, from `kdist.launch` output (`[launch] worker 1 pid 123`)."""
    import re

    return {m[0]: int(m[1]) for m in re.findall(r"\[launch\] (\w+ \d+) pid (\d+)", text)}


def non_loopback_ipv4() -> str | None:
    """An IPv4 address of this machine that is not loopback, or `None`."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                request = struct.pack("256s", name.encode()[:15])
                address = socket.inet_ntoa(fcntl.ioctl(sock, 0x8915, request)[20:24])  # SIOCGIFADDR
            except OSError:
                continue
            if not address.startswith("127."):
                return address
    return None


def start_launch(args: Sequence[str], *, cwd: Path, env: dict | None = None):
    """`python -m kdist.launch args` in its own session, output piped; the caller kills it."""
    return subprocess.Popen(
        [sys.executable, "-m", "kdist.launch", *args],
        cwd=cwd,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def read_until(process, pattern: str, *, timeout: float, seen: list[str], count: int = 1) -> list:
    """Read `process.stdout` lines into `seen` until `pattern` matched `count` times.

    Returns the matches; fails when the process ends or `timeout` seconds pass first
    (checked between lines: the tasks print often).
    """
    import re
    import time

    deadline = time.monotonic() + timeout
    found = []
    assert process.stdout is not None
    for line in process.stdout:
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            found.append(match)
            if len(found) == count:
                return found
        assert time.monotonic() < deadline, f"no {pattern!r} in time: {''.join(seen)[-3000:]}"
    raise AssertionError(f"output ended before {pattern!r}: {''.join(seen)[-3000:]}")
