"""Process set-up before any model exists: logs, threads, logical devices, seeds, precision."""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Any

from kdist.config.errors import ConfigError
from kdist.process import quiet

__all__ = ["INTRA_OP_THREADS", "enable_memory_growth", "quiet_tensorflow", "setup"]

# TensorFlow's own variable: intra-op threads of a process whose config leaves them at 0.
INTRA_OP_THREADS = "TF_NUM_INTRAOP_THREADS"

log = logging.getLogger(__name__)


def quiet_tensorflow(level: int = 2) -> None:
    """Turn down TensorFlow's C++ log noise; effective only before TensorFlow is imported.

    At level 1 or more it also drops the start-up lines the variable cannot silence
    (see `kdist.process.quiet`).

    Args:
        level: `TF_CPP_MIN_LOG_LEVEL` (0 all, 1 no INFO, 2 no WARNING, 3 no ERROR); an
            explicit environment variable wins. Defaults to `2`.
    """
    quiet.set_level(level)
    quiet.install()


class TensorFlowBelow(logging.Filter):
    """Drops the records TensorFlow's own code logs below `level` (through absl)."""

    def __init__(self, level: int):
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        from_tensorflow = "tensorflow" in record.pathname.replace("\\", "/").split("/")
        return record.levelno >= self.level or not from_tensorflow


def _split_devices(count: int) -> None:
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    physical = gpus[0] if gpus else tf.config.list_physical_devices("CPU")[0]
    kind = "GPU" if gpus else "CPU"
    current = tf.config.get_logical_device_configuration(physical)
    if current is not None and len(current) == count:
        return
    config = [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
    if gpus:
        # A GPU can only be split with explicit memory limits; share its memory evenly.
        memory = tf.config.experimental.get_device_details(physical).get("memory_limit_mb")
        per_device = int(memory // count) if memory else 1024
        config = [
            tf.config.LogicalDeviceConfiguration(memory_limit=per_device) for _ in range(count)
        ]
    try:
        tf.config.set_logical_device_configuration(physical, config)
    except RuntimeError:
        have = len(tf.config.list_logical_devices(kind))
        raise ConfigError(
            "runtime.logical_devices",
            f"TensorFlow is already initialised in this process with {have} logical "
            f"{kind} device(s)",
            value=count,
            hint="set it before anything runs in TensorFlow (restart the Python process or "
            f"kernel), or use runtime.logical_devices={have}",
        ) from None


def _set_threads(runtime: Any) -> None:
    """Apply `runtime.intra_op_threads` and `runtime.inter_op_threads` (null: unchanged)."""
    import tensorflow as tf

    threading = tf.config.threading
    pools = {
        "intra_op_threads": (
            threading.get_intra_op_parallelism_threads,
            threading.set_intra_op_parallelism_threads,
        ),
        "inter_op_threads": (
            threading.get_inter_op_parallelism_threads,
            threading.set_inter_op_parallelism_threads,
        ),
    }
    for key, (get, set_) in pools.items():
        wanted = runtime.get(key)
        if wanted is None or get() == int(wanted):
            continue
        try:
            set_(int(wanted))
        except RuntimeError:
            have = get() or "TensorFlow's default"
            raise ConfigError(
                f"runtime.{key}",
                f"TensorFlow is already initialised in this process with {have} thread(s)",
                value=wanted,
                hint="set it before anything runs in TensorFlow (restart the Python process or "
                "kernel), or leave it null",
            ) from None


def enable_memory_growth() -> None:
    """Let TensorFlow take GPU memory as it needs it, not all of it at start-up.

    Must run before the first GPU use; on GPUs already initialised or split into
    logical devices it changes nothing. Every process kdist starts calls it
    (`runtime.memory_growth`, on by default, for training; always for `kdist.server`).
    """
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except (RuntimeError, ValueError):
            # Already initialised, or split into logical devices: growth cannot change now.
            log.debug("memory growth left unchanged on %s", gpu.name)


def setup(runtime: Any) -> None:
    """Apply `cfg.runtime`: threads, devices, memory growth, seeds, determinism, precision.

    Args:
        runtime: the `runtime` config node.

    Raises:
        ConfigError: when `runtime.logical_devices` or a thread count can no longer be
            applied (TensorFlow already initialised with other values).
    """
    quiet_tensorflow(int(runtime.tf_log_level))
    import keras
    import tensorflow as tf

    from kdist.compat.tf_private import disable_op_determinism

    # TensorFlow's Python logger mirrors the C++ level: INFO lines such as "Using
    # MirroredStrategy with devices ..." only when the user asks for them.
    python_level = {0: logging.INFO, 1: logging.WARNING, 2: logging.WARNING, 3: logging.ERROR}
    level = python_level[int(runtime.tf_log_level)]
    logging.getLogger("tensorflow").setLevel(level)
    # Parts of TensorFlow log through absl instead ("Sharding callback duration" on each
    # checkpoint save): the same level for them, by a filter, not the absl logger's level,
    # which Keras's `io_utils.print_msg` logs through when interactive logging is off
    # (a callback's `verbose=1` lines: "LearningRateScheduler setting learning rate").
    absl = logging.getLogger("absl")
    for old in [f for f in absl.filters if isinstance(f, TensorFlowBelow)]:
        absl.removeFilter(old)
    absl.addFilter(TensorFlowBelow(level))
    # Raised by tf.data when a distributed dataset is iterated inside a tf.function (the
    # validation loop); it describes TensorFlow internals, not anything the user can change.
    warnings.filterwarnings(
        "ignore", message="To make it possible to preserve tf.data options", category=UserWarning
    )

    # The first use of a device prints the cuInit ERROR line on a machine without CUDA.
    filtered = quiet.filtered_stderr(quiet.stderr_noise())
    with filtered if quiet.enabled() else contextlib.nullcontext():
        _set_threads(runtime)
        if runtime.logical_devices:
            _split_devices(int(runtime.logical_devices))
        elif runtime.memory_growth:
            enable_memory_growth()
        tf.config.list_physical_devices()

    keras.utils.set_random_seed(int(runtime.seed))
    if runtime.deterministic:
        tf.config.experimental.enable_op_determinism()
    else:
        # A process setting, as the precision policy below: an earlier Experiment of this
        # process (a notebook) with deterministic=true left it on, which also turns XLA
        # off for every model (Keras's `model_supports_jit`).
        disable_op_determinism()

    policy = runtime.mixed_precision or "float32"
    keras.mixed_precision.set_global_policy(policy)
