"""Strategies that run in one process: one device, mirrored over local devices, auto."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import tensorflow as tf

from kdist.compat.tf_private import bump_collective_key_base
from kdist.config.errors import ConfigError
from kdist.config.validate import check_choice
from kdist.strategies.shared import check_nccl

__all__ = ["auto", "mirrored", "one_device"]

log = logging.getLogger(__name__)


def _canonical(name: str) -> str:
    return tf.DeviceSpec.from_string(name).to_string().upper()


def _check_devices(key: str, devices: Sequence[str]) -> list[str]:
    logical = tf.config.list_logical_devices()
    known = {_canonical(d.name): d.name for d in logical}
    checked = []
    for device in devices:
        try:
            canonical = _canonical(str(device))
        except ValueError:
            canonical = "?"
        if canonical not in known:
            names = ", ".join(_short(d.name) for d in logical)
            raise ConfigError(
                key,
                f"device {device!r} does not exist",
                value=list(devices),
                hint=f"devices on this machine: {names} (split a device with "
                "runtime.logical_devices=N)",
            )
        checked.append(known[canonical])
    return checked


def _short(name: str) -> str:
    spec = tf.DeviceSpec.from_string(name)
    return f"/{spec.device_type.lower()}:{spec.device_index}"


def _local_devices() -> list[str]:
    gpus = tf.config.list_logical_devices("GPU")
    return [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]


def one_device(*, device: str | None = None) -> tf.distribute.Strategy:
    """`tf.distribute.OneDeviceStrategy` on `device`.

    Args:
        device: e.g. `"/gpu:0"`. Defaults to `None`: the first GPU, else the first CPU.

    Returns:
        The strategy.

    Raises:
        ConfigError: naming `strategy.device` when the device does not exist.
    """
    chosen = device or _local_devices()[0]
    (name,) = _check_devices("strategy.device", [chosen])
    return tf.distribute.OneDeviceStrategy(name)


_CROSS_DEVICE_OPS = {
    "auto": None,
    "nccl": tf.distribute.NcclAllReduce,
    "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
    "reduction_to_one_device": tf.distribute.ReductionToOneDevice,
}


def mirrored(
    *, devices: Sequence[str] | None = None, cross_device_ops: str = "auto"
) -> tf.distribute.Strategy:
    """`tf.distribute.MirroredStrategy` over local devices.

    Args:
        devices: device names, e.g. `["/cpu:0", "/cpu:1"]`. Defaults to `None`: every
            local GPU, or every logical CPU when there is no GPU.
        cross_device_ops: how gradients are all-reduced: `auto` (TensorFlow's choice),
            `nccl`, `hierarchical_copy` or `reduction_to_one_device`. Defaults to `"auto"`.

    Returns:
        The strategy.

    Raises:
        ConfigError: naming `strategy.devices` or `strategy.cross_device_ops`.
    """
    names = _check_devices("strategy.devices", list(devices)) if devices else _local_devices()
    check_choice("strategy.cross_device_ops", cross_device_ops, _CROSS_DEVICE_OPS)
    ops_class = _CROSS_DEVICE_OPS[cross_device_ops]
    check_nccl(
        "strategy.cross_device_ops",
        cross_device_ops,
        tf.config.list_logical_devices,
        "use auto or reduction_to_one_device",
    )
    ops = ops_class() if ops_class is not None else None
    _fresh_collective_keys()
    return tf.distribute.MirroredStrategy(devices=names, cross_device_ops=ops)


_mirrored_created = 0


def _fresh_collective_keys() -> None:
    """Give each MirroredStrategy of the process its own collective key range.

    Every MirroredStrategy starts its collective group and instance keys at the same
    base, so a second one in the same process (a notebook that builds two experiments,
    a sweep) reuses the first one's keys and its all-reduce fails with "Shape mismatch
    in the collective instance". TensorFlow's own tests move the base by 100000 per
    strategy (`strategy_combinations._mirrored_strategy_with_collective_key_base`).
    """
    global _mirrored_created
    if _mirrored_created:
        bump_collective_key_base(100_000)
    _mirrored_created += 1


def auto() -> tf.distribute.Strategy:
    """Mirrored over every local GPU when there is more than one, else one device."""
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        log.info("strategy=auto: %d GPUs, using MirroredStrategy", len(gpus))
        return mirrored()
    log.info("strategy=auto: using OneDeviceStrategy")
    return one_device()
