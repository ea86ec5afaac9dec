"""TensorFlow's private names that kdist uses, each reached in one function.

Each function names the upstream symbol and the kdist code that needs it when an upgrade
moves it (`kdist.compat.upstream.UpstreamMoved`); `PRIVATE_NAMES` says why each is used.
The asynchronous checkpoint functions use about ten private attributes of TensorFlow
2.21's `AsyncCheckpointHelper`: kdist keeps its host copies and writes them on its own
thread (`kdist.engine.checkpoint`).
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from kdist.compat.upstream import private_attribute, private_import

__all__ = [
    "async_helper",
    "bump_collective_key_base",
    "copy_keras_variable_to_cpu",
    "copy_trackable_to_cpu",
    "dataset_inputs",
    "disable_op_determinism",
    "expand_hostlist",
    "expand_tasks_per_node",
    "helper_copy_function",
    "helper_device",
    "helper_host_variables",
    "host_variable",
    "initialize_helper",
    "no_partial_batch_handling",
    "ps_cluster_resolver",
    "set_saved_tensors",
    "sharded_variable_type",
    "stop_helper_thread",
]

_HELPER = "tensorflow.python.checkpoint.async_checkpoint_helper.AsyncCheckpointHelper"
_ASYNC = "kdist.engine.checkpoint (asynchronous saves)"
_SLURM = "tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver"


def host_variable(initial_value: Any, *, name: str) -> Any:
    """A plain variable on this process's CPU, made inside a strategy's scope too.

    In a `tf.distribute` scope `tf.Variable` makes a distributed variable (under
    `MirroredStrategy` one copy per replica's device); TensorFlow's `ResourceVariable`
    class, built directly, passes by the scope's variable creators.
    """
    import tensorflow as tf

    variable = private_import(
        "tensorflow.python.ops.resource_variable_ops",
        "ResourceVariable",
        "kdist.engine.sync.replica_state",
    )
    with tf.device("CPU:0"):
        return variable(initial_value, trainable=False, name=name)


def sharded_variable_type() -> Any:
    """TensorFlow's `ShardedVariable` class (parameter-server partitioned variables)."""
    return private_import(
        "tensorflow.python.distribute.sharded_variable", "ShardedVariable", "kdist.engine.sharded"
    )


def disable_op_determinism() -> None:
    """Turn TensorFlow's op determinism off again (`tf.config.experimental` only turns it
    on), when it is on."""
    config = "tensorflow.python.framework.config"
    if private_import(config, "is_op_determinism_enabled", "kdist.process.runtime")():
        private_import(config, "disable_op_determinism", "kdist.process.runtime")()


def expand_hostlist(hosts: str) -> list[str]:
    """SLURM's compressed host list (`node[1-3]`) as names, as TensorFlow reads it."""
    expand = private_import(_SLURM, "expand_hostlist", "kdist.cluster.slurm.slurm_info")
    return list(expand(hosts))


def expand_tasks_per_node(tasks: str) -> list[int]:
    """SLURM's tasks per node (`2(x3),1`) as one count per node."""
    expand = private_import(_SLURM, "expand_tasks_per_node", "kdist.cluster.slurm")
    return [int(n) for n in expand(tasks)]


def ps_cluster_resolver(strategy: Any) -> Any:
    """The cluster resolver of a `ParameterServerStrategy` (its public one answers `None`)."""
    return getattr(strategy, "_cluster_resolver", None)


def dataset_inputs(ds: Any) -> list[Any]:
    """The datasets `ds` was made from (`_input_dataset`, `_input_datasets`), if any."""
    found: list[Any] = []
    single = getattr(ds, "_input_dataset", None)
    if single is not None:
        found.append(single)
    found.extend(getattr(ds, "_input_datasets", None) or [])
    return found


def async_helper(checkpoint: Any, *, own: bool) -> Any:
    """An `AsyncCheckpointHelper` of `checkpoint`: its own (`own=False`) or a new one.

    Args:
        checkpoint: a `tf.train.Checkpoint`.
        own: make another helper over the same objects, with its own host copies.
    """
    if not own:
        make = private_attribute(
            checkpoint, "_async_checkpointer", "tf.train.Checkpoint._async_checkpointer", _ASYNC
        )
        return make()
    helper_class = private_import(
        "tensorflow.python.checkpoint.async_checkpoint_helper", "AsyncCheckpointHelper", _ASYNC
    )
    kwargs = private_attribute(checkpoint, "_kwargs", "tf.train.Checkpoint._kwargs", _ASYNC)
    import tensorflow as tf

    return helper_class(tf.train.Checkpoint, **kwargs)


def initialize_helper(helper: Any) -> None:
    """Build `helper`'s host copies (making the first) and stop its writer thread."""
    if not private_attribute(helper, "_initialized", f"{_HELPER}._initialized", _ASYNC):
        private_attribute(helper, "_ensure_initialized", f"{_HELPER}._ensure_initialized", _ASYNC)()
        stop_helper_thread(helper)  # kdist writes on its own thread


def helper_copy_function(helper: Any) -> Callable[[Any], None]:
    """TensorFlow's copy to the host copies, as plain Python (`_copy_to_cpu`).

    In a runner's train function it adds its ops there instead of a nested call.
    """
    copy = private_attribute(type(helper), "_copy_to_cpu", f"{_HELPER}._copy_to_cpu", _ASYNC)
    return copy.python_function


def helper_device(helper: Any) -> Any:
    """The device `helper` writes on (`_default_device`)."""
    return private_attribute(helper, "_default_device", f"{_HELPER}._default_device", _ASYNC)


def helper_host_variables(helper: Any) -> list[Any]:
    """`helper`'s host copies (the values of its `_object_map`)."""
    object_map = private_attribute(helper, "_object_map", f"{_HELPER}._object_map", _ASYNC)
    return list(object_map.values())


def stop_helper_thread(helper: Any) -> None:
    """Stop TensorFlow's async checkpoint thread of `helper` (kdist writes on its own).

    TensorFlow starts the thread when its helper initializes and registers it with
    `atexit`, which would hold the model, the optimizer and their host copies for the
    rest of the process (every trial of a tuner).
    """
    thread = getattr(helper, "_async_save_thread", None)
    if thread is None or not thread.is_alive():
        return
    join = private_attribute(
        helper, "_join_async_save_thread", f"{_HELPER}._join_async_save_thread", _ASYNC
    )
    join()
    # The stop item: a later `sync` must not wait for it.
    private_attribute(helper, "_queue", f"{_HELPER}._queue", _ASYNC).task_done()
    atexit.unregister(join)


def copy_trackable_to_cpu(variable: Any, object_map: dict[Any, Any]) -> None:
    """TensorFlow's host copy of `variable` into `object_map` (`_copy_trackable_to_cpu`)."""
    copy = private_attribute(
        variable, "_copy_trackable_to_cpu", "tf.Variable._copy_trackable_to_cpu", _ASYNC
    )
    copy(object_map)


def copy_keras_variable_to_cpu(self: Any, object_map: dict[Any, Any]) -> None:
    """`_copy_trackable_to_cpu` for a Keras 3 TensorFlow variable that can run twice.

    Keras 3.15.1 (its TensorFlow backend's `Variable`) makes a new `tf.Variable` for
    the host copy at every call; TensorFlow's async checkpoint helper calls it inside a
    `tf.function` at every save after the first, which fails ("tf.function only supports
    singleton tf.Variables created on the first call"). This one creates the copy once
    and assigns to it afterwards, as `ResourceVariable._copy_trackable_to_cpu` does.
    It sits beside `initialize_helper`, whose call into TensorFlow runs it, so that the
    call stays in this module (`kdist.engine.checkpoint.host_copies` installs it).
    """
    import tensorflow as tf

    copy_trackable_to_cpu(self.value, object_map)
    if self in object_map:
        object_map[self].assign(object_map[self.value])
    else:
        object_map[self] = tf.Variable(object_map[self.value])


def set_saved_tensors(
    trackable: Any,
    serialize: Callable[[], dict[str, Any]],
    restore: Callable[[dict[str, Any]], Any],
) -> None:
    """Make `trackable` save and restore through `serialize` and `restore`.

    TensorFlow's checkpoint saves an object by calling its `_serialize_to_tensors` and
    restores it with `_restore_from_tensors`; set on the instance, they replace the
    class's for this object only.
    """
    for name in ("_serialize_to_tensors", "_restore_from_tensors"):
        private_attribute(
            trackable, name, f"tf.train.Checkpoint's {name} protocol", "kdist.engine.sharded"
        )
    trackable._serialize_to_tensors = serialize
    trackable._restore_from_tensors = restore


@contextlib.contextmanager
def no_partial_batch_handling(strategy: Any) -> Iterator[None]:
    """Distribute datasets without TensorFlow's partial batch handling inside the block.

    `MirroredStrategy` and `MultiWorkerMirroredStrategy` turn it on: a finite distributed
    dataset then asks, at every step, how many replicas still have a batch (an all-reduce
    across the workers), so that a worker whose data ends early gets empty batches. It is
    read from `strategy.extended.enable_partial_batch_handling` when a distributed dataset
    is built (`tensorflow.python.distribute.input_lib._enable_get_next_as_optional`).
    Only for data that every replica reads at every step, whose passes end at the same step
    on every worker.
    """
    extended = strategy.extended
    name = "enable_partial_batch_handling"
    had = name in vars(extended)
    before = getattr(extended, name, None)
    setattr(extended, name, False)
    try:
        yield
    finally:
        if had:
            setattr(extended, name, before)
        else:
            delattr(extended, name)


def bump_collective_key_base(amount: int) -> None:
    """Move `MirroredStrategy`'s class-wide collective key base by `amount`.

    A second `MirroredStrategy` in one process reuses the first one's collective keys;
    TensorFlow's own tests move the base this way between strategies.
    """
    import tensorflow as tf

    base = private_attribute(
        tf.distribute.MirroredStrategy,
        "_collective_key_base",
        "tf.distribute.MirroredStrategy._collective_key_base",
        "kdist.strategies.single_host",
    )
    tf.distribute.MirroredStrategy._collective_key_base = base + amount
