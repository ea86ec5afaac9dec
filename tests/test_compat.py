"""Every private Keras/TensorFlow name kdist uses is where kdist expects it.

One probe per entry of `kdist.compat.PRIVATE_NAMES`, through the `kdist.compat` function
kdist calls. After an upgrade that moves a name, its probe fails with a message naming
the upstream symbol and the kdist code that needs it.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from kdist.compat import OVERRIDDEN_HOOKS, PRIVATE_NAMES, UpstreamMoved
from kdist.compat import keras_private as kl
from kdist.compat import keras_private as kp
from kdist.compat import tf_private as tp
from kdist.compat import tools_private as tt
from kdist.compat.upstream import private_attribute, private_import

KDIST = Path(__file__).resolve().parents[1] / "kdist"


@functools.cache
def _model() -> keras.Model:
    """A small functional model, compiled with a loss and a metric, fitted one step."""
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(np.zeros((4, 3), "float32"), np.zeros(4, "int32"), epochs=1, verbose=0)
    return model


class SmallSubclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(2)

    def call(self, x):
        return self.dense(x)


def _keras_output_spec():
    spec = kp.compute_output_spec(SmallSubclassed(), keras.KerasTensor((None, 3)))
    assert tuple(spec.shape) == (None, 2)


def _keras_class_weights():
    weights = kp.class_weight_to_sample_weights(np.array([0, 1, 2]), {0: 1.0, 1: 3.0})
    np.testing.assert_allclose(weights, [1.0, 3.0, 1.0])


def _keras_flatten_metrics():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    x, y = np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32)
    logs = model.evaluate(x, y, verbose=0, return_dict=True)
    assert kp.flatten_metrics_in_order(model, logs) == [logs["loss"], logs["mae"]]


def _keras_symbolic_build():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    kp.symbolic_build(model, (keras.KerasTensor((None, 3)), keras.KerasTensor((None, 2))))
    assert kp.compile_metrics(model).built


def _keras_flatten_layers():
    layers = kp.flatten_layers(_model(), include_self=False)
    assert [type(layer).__name__ for layer in layers][-1] == "Dense"


def _keras_seed_generators():
    assert kp.seed_generators(keras.layers.Dropout(0.5, seed=1))


def _keras_inputs_struct():
    assert kp.inputs_struct(_model()) is not None


def _keras_outputs_struct():
    assert kp.outputs_struct(_model()) is not None


def _keras_compile_loss():
    assert kp.compile_loss(_model()) is not None


def _keras_unscale():
    assert float(kp.unscale_loss_function()(tf.constant(2.0))) == 2.0


def _keras_compute_loss():
    model = _model()
    x, y = tf.zeros((2, 3)), tf.zeros(2, tf.int32)
    loss = kp.compute_loss(model, x=x, y=y, y_pred=model(x), sample_weight=None, training=True)
    assert np.isfinite(float(loss))


def _keras_loss_tracker():
    assert kp.loss_tracker(_model()).name == "loss"


def _keras_compile_metrics():
    assert kp.compile_metrics(_model()) is not None


def _keras_call_has_training_arg():
    assert kp.call_has_training_arg(_model()) in (True, False)
    private_attribute(_model(), "_call_has_training_arg", "x", "y")


def _keras_distribute_strategy():
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        inputs = keras.Input((3,))
        model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    assert kp.distribute_strategy(model) is strategy


def _keras_flat_metrics():
    compiled = kp.compile_metrics(_model())
    assert type(compiled).__name__ == "CompileMetrics"
    assert kp.flat_metrics(compiled), "CompileMetrics holds no _flat_metrics"


def _keras_direction():
    assert kp.metric_direction(keras.metrics.SparseCategoricalAccuracy()) == "up"
    assert kp.metric_direction(keras.metrics.MeanSquaredError()) == "down"


def _keras_learning_rate():
    constant = kp.learning_rate_variable(keras.optimizers.SGD(0.5))
    assert isinstance(constant, keras.Variable) and float(constant.numpy()) == 0.5
    schedule = keras.optimizers.schedules.ExponentialDecay(0.5, 10, 0.9)
    assert kp.learning_rate_variable(keras.optimizers.SGD(schedule)) is schedule


def _keras_safe_mode_scope():
    private_import("keras.src.saving.serialization_lib", "SafeModeScope", "test")
    with kp.safe_mode_scope():
        assert keras.config.enable_unsafe_deserialization is not None


def _keras_variable_copy():
    variable = private_import("keras.src.backend.tensorflow.core", "Variable", "test")
    assert callable(variable._copy_trackable_to_cpu)
    assert isinstance(keras.Variable(1.0), variable)


def _keras_definitions():
    import importlib

    for module in kp.KERAS_DEFINITION_MODULES:
        importlib.import_module(module)
    assert keras.losses.MeanSquaredError.__module__.startswith(kp.KERAS_DEFINITION_MODULES)
    assert keras.callbacks.EarlyStopping.__module__.startswith(kp.KERAS_DEFINITION_MODULES)
    for name in kp.KERAS_UNTRUSTED_DEFINITIONS:
        module, attribute = name.rsplit(".", 1)
        assert private_import(module, attribute, "kdist.config.trust") is not None


def _tf_host_variable():
    strategy = tf.distribute.MirroredStrategy(["CPU:0"])
    with strategy.scope():
        variable = tp.host_variable(tf.zeros((2, 3)), name="bank")
    assert not isinstance(variable, tf.distribute.DistributedValues)
    assert tf.DeviceSpec.from_string(variable.device).device_type == "CPU"


def _tf_sharded():
    assert isinstance(tp.sharded_variable_type(), type)


def _tf_async_helper(tmp_path: Path):
    checkpoint = tf.train.Checkpoint(v=tf.Variable([1.0, 2.0]))
    checkpoint.write(str(tmp_path / "plain"))  # the checkpoint's objects are tracked
    for own in (False, True):
        helper = tp.async_helper(checkpoint, own=own)
        tp.initialize_helper(helper)
        assert callable(tp.helper_copy_function(helper))
        assert isinstance(tp.helper_device(helper), str)
        assert any(isinstance(v, tf.Variable) for v in tp.helper_host_variables(helper))
        tp.stop_helper_thread(helper)


def _tf_copy_to_cpu():
    from tensorflow.python.util.object_identity import ObjectIdentityDictionary

    variable = tf.Variable([1.0, 2.0])
    object_map = ObjectIdentityDictionary()  # what TensorFlow's async helper passes
    tp.copy_trackable_to_cpu(variable, object_map)
    assert np.array_equal(object_map[variable].numpy(), [1.0, 2.0])


def _tf_saved_tensors(tmp_path: Path):
    variable = keras.Variable([1.0, 2.0])
    restored = []
    tp.set_saved_tensors(
        variable,
        lambda: {"VARIABLE_VALUE": tf.constant([5.0, 6.0])},
        lambda tensors: restored.append(tensors["VARIABLE_VALUE"].numpy()),
    )
    path = tf.train.Checkpoint(v=variable).write(str(tmp_path / "ckpt"))
    tf.train.Checkpoint(v=variable).read(path)
    assert np.array_equal(restored[0], [5.0, 6.0])


def _tf_checkpoint_private():
    checkpoint = tf.train.Checkpoint(v=tf.Variable(1.0))
    private_attribute(checkpoint, "_async_checkpointer", "tf.train.Checkpoint", "test")
    assert "v" in private_attribute(checkpoint, "_kwargs", "tf.train.Checkpoint", "test")


def _tf_determinism():
    import tensorflow as tf
    from tensorflow.python.framework import config

    tf.config.experimental.enable_op_determinism()
    tp.disable_op_determinism()
    assert not config.is_op_determinism_enabled()


def _tf_slurm():
    assert tp.expand_hostlist("node[1-2]") == ["node1", "node2"]
    assert tp.expand_tasks_per_node("2(x2),1") == [2, 2, 1]


def _tf_ps_resolver():
    # The attribute is set in ParameterServerStrategy's constructor, which needs a
    # running cluster (seconds): check the constructor's source instead.
    import inspect

    source = inspect.getsource(tf.distribute.ParameterServerStrategy.__init__)
    assert "self._cluster_resolver = " in source
    assert tp.ps_cluster_resolver(object()) is None


def _tf_dataset_inputs():
    batched = tf.data.Dataset.range(4).batch(2).map(lambda x: x)
    inputs = tp.dataset_inputs(batched)
    assert inputs and "Batch" in type(inputs[0]).__name__
    joined = tf.data.Dataset.range(2).concatenate(tf.data.Dataset.range(2))
    assert len(tp.dataset_inputs(joined)) >= 2


def _tuner_servicer():
    assert isinstance(tt.oracle_servicer_class(), type)


def _tuner_client():
    assert callable(tt.oracle_client_class().create_trial)


def _tuner_protos():
    protos = tt.tuner_protos()
    assert protos.get_service().GetSpaceRequest() is not None
    assert callable(protos.get_service_grpc().OracleStub)


def _tuner_exists():
    import keras_tuner

    space = keras_tuner.HyperParameters()
    space.Int("units", 1, 4)
    assert tt.space_has(space, "units", [])
    assert not tt.space_has(space, "other", [])


def _hydra_locate():
    assert tt.hydra_locate("keras.layers.Dense") is keras.layers.Dense


def _hydra_parser():
    args = tt.hydra_args_parser().parse_args(["--multirun", "a=1"])
    assert args.multirun and args.overrides == ["a=1"]


def _hydra_compose():
    assert isinstance(tt.hydra_class(), type)
    assert tt.hydra_config_search_path("pkg://kdist.conf") is not None


def _hydra_run_composed(tmp_path: Path):
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from kdist.config import register
    from kdist.train import run_composed

    register()  # kdist's schemas, as `kdist train` registers them first
    GlobalHydra.instance().clear()
    try:
        hydra = tt.app_hydra("train", "pkg://kdist.conf", None)
        overrides = [f"hydra.run.dir={tmp_path / 'run'}", "hydra/job_logging=none"]
        cfg = hydra.compose_config(
            config_name="train",
            overrides=overrides,
            run_mode=RunMode.RUN,
            with_log_configuration=False,
        )
        seen = []
        job = lambda job_cfg: seen.append((job_cfg, HydraConfig.get().job.name)) or 7  # noqa: E731
        # kdist.train runs Hydra's job with Hydra's private Callbacks and run_and_report.
        assert run_composed(hydra, cfg, "train", job, logging=False) == 7
        assert "hydra" not in seen[0][0] and "trainer" in seen[0][0]
        assert seen[0][1] == "train"  # the app's name: its log file is train.log
        assert (tmp_path / "run").is_dir()
    finally:
        GlobalHydra.instance().clear()


def _keras_all_reduce():
    optimizer = keras.optimizers.SGD(0.1)
    assert callable(optimizer._all_reduce_sum_gradients)
    kp.replace_all_reduce(optimizer, lambda pairs: pairs)
    assert optimizer._all_reduce_sum_gradients([1]) == [1]


def _keras_close_writers(tmp_path: Path):
    kp.close_tensorboard_writers(keras.callbacks.TensorBoard(log_dir=str(tmp_path)))


def _keras_should_eval():
    assert [kl.should_eval(epoch, 2) for epoch in range(4)] == [False, True, False, True]
    assert kl.should_eval(2, [3]) and not kl.should_eval(1, [3])


def _keras_initial_epoch():
    model = keras.Sequential([keras.layers.Dense(1)])
    assert kl.initial_epoch_of(model) is None
    model._initial_epoch = 3  # what BackupAndRestore sets
    assert kl.initial_epoch_of(model) == 3


def _tf_batch_size():
    ds = tf.data.Dataset.range(10).batch(4).prefetch(1).map(lambda x: x)
    assert kl.batch_op_size(ds) == 4
    assert kl.batch_op_size(tf.data.Dataset.range(10).padded_batch(3)) == 3
    assert kl.batch_op_size(ds.unbatch()) is None


def _tf_partial_batch_handling():
    # TensorFlow's input_lib reads the attribute when a distributed dataset is built: a
    # finite dataset of unknown batch size gets partial batch handling (an all-reduce a
    # step across workers) unless the block turns it off.
    from tensorflow.python.distribute import input_lib

    enabled = input_lib._enable_get_next_as_optional
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    dataset = tf.data.Dataset.range(5).batch(2)
    cardinality = dataset.cardinality()
    assert enabled(strategy, dataset, cardinality)
    with tp.no_partial_batch_handling(strategy):
        assert not enabled(strategy, dataset, cardinality)
    assert enabled(strategy, dataset, cardinality)


def _tf_collective_key_base():
    before = tf.distribute.MirroredStrategy._collective_key_base
    tp.bump_collective_key_base(0)
    assert tf.distribute.MirroredStrategy._collective_key_base == before


def _tuner_seed_state():
    import keras_tuner

    oracle = keras_tuner.oracles.RandomSearchOracle(objective="loss", max_trials=1)
    tt.set_oracle_seed(oracle, 7)
    assert oracle.seed == 7 and oracle._seed_state == 7


def _omegaconf_root():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"tuner": {"seed": 1}, "objective": {"name": "loss"}})
    assert tt.config_root(cfg.tuner) is cfg


def _hydra_basic_sweeper():
    from hydra import compose, initialize_config_module

    from kdist.compat.upstream import private_import
    from kdist.config import register

    register()
    with initialize_config_module("kdist.conf", version_base="1.3"):
        cfg = compose("train", return_hydra_config=True)
    # Hydra's default sweeper is still the class of that name, and kdist recognises it.
    assert tt.is_basic_sweeper(cfg.hydra.sweeper._target_)
    private_import("hydra._internal.core_plugins.basic_sweeper", "BasicSweeper", "probe")
    assert not tt.is_basic_sweeper("hydra_plugins.hydra_optuna_sweeper.OptunaSweeper")


def _hydra_return_value():
    from hydra.core.utils import JobReturn

    job = JobReturn()
    job.return_value = 3
    assert tt.job_return_value(job) == 3


def _omegaconf_resolvers():
    from omegaconf import OmegaConf

    owner = tt.resolver_registry()
    assert "oc.env" in owner._resolvers
    cfg = OmegaConf.create({"a": 1, "b": "${oc.select:a}"})
    saved = owner._resolvers
    owner._resolvers = {}
    try:
        with pytest.raises(Exception, match=r"oc\.select"):
            OmegaConf.to_container(cfg, resolve=True)
    finally:
        owner._resolvers = saved
    assert OmegaConf.to_container(cfg, resolve=True) == {"a": 1, "b": 1}


PROBES = {
    "keras.src.backend.compute_output_spec": _keras_output_spec,
    "keras.Model._symbolic_build": _keras_symbolic_build,
    "keras.Layer._flatten_layers": _keras_flatten_layers,
    "keras.Layer._seed_generators": _keras_seed_generators,
    "keras.Model._inputs_struct": _keras_inputs_struct,
    "keras.Model._outputs_struct": _keras_outputs_struct,
    "keras.Model._compile_loss": _keras_compile_loss,
    "keras.src.trainers.data_adapters.data_adapter_utils.class_weight_to_sample_weights": (
        _keras_class_weights
    ),
    "keras.Model._flatten_metrics_in_order": _keras_flatten_metrics,
    "keras.src.losses.loss.unscale_loss_for_distribution": _keras_unscale,
    "keras.Model._compute_loss": _keras_compute_loss,
    "keras.Model._loss_tracker": _keras_loss_tracker,
    "keras.Model._compile_metrics": _keras_compile_metrics,
    "keras.Model._call_has_training_arg": _keras_call_has_training_arg,
    "keras.Model._distribute_strategy": _keras_distribute_strategy,
    "keras.src.trainers.compile_utils.CompileMetrics._flat_metrics": _keras_flat_metrics,
    "keras.metrics.Metric._direction": _keras_direction,
    "keras.optimizers.Optimizer._learning_rate": _keras_learning_rate,
    "keras.src.saving.serialization_lib.SafeModeScope": _keras_safe_mode_scope,
    "keras.src.backend.tensorflow.core.Variable._copy_trackable_to_cpu": _keras_variable_copy,
    "keras.src (definition modules of keras.losses, metrics, ...)": _keras_definitions,
    "tensorflow.python.distribute.sharded_variable.ShardedVariable": _tf_sharded,
    "tensorflow.python.ops.resource_variable_ops.ResourceVariable": _tf_host_variable,
    "tensorflow.python.checkpoint.async_checkpoint_helper.AsyncCheckpointHelper": (
        _tf_async_helper
    ),
    "tf.Variable._copy_trackable_to_cpu": _tf_copy_to_cpu,
    "tf.train.Checkpoint's _serialize_to_tensors/_restore_from_tensors protocol": (
        _tf_saved_tensors
    ),
    "tf.train.Checkpoint._async_checkpointer, tf.train.Checkpoint._kwargs": (
        _tf_checkpoint_private
    ),
    "tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver": _tf_slurm,
    "tensorflow.python.framework.config.disable_op_determinism": _tf_determinism,
    "tf.distribute.ParameterServerStrategy._cluster_resolver": _tf_ps_resolver,
    "tf.data.Dataset._input_dataset, tf.data.Dataset._input_datasets": _tf_dataset_inputs,
    "keras_tuner.src.distribute.oracle_chief.OracleServicer": _tuner_servicer,
    "keras_tuner.src.distribute.oracle_client.OracleClient": _tuner_client,
    "keras_tuner.src.protos": _tuner_protos,
    "keras_tuner.HyperParameters._exists": _tuner_exists,
    "hydra._internal.utils._locate": _hydra_locate,
    "hydra._internal.utils.get_args_parser": _hydra_parser,
    "keras.optimizers.Optimizer._all_reduce_sum_gradients": _keras_all_reduce,
    "keras.callbacks.TensorBoard._close_writers": _keras_close_writers,
    "tf.distribute StrategyExtended.enable_partial_batch_handling": _tf_partial_batch_handling,
    "tf.distribute.MirroredStrategy._collective_key_base": _tf_collective_key_base,
    "keras_tuner.Oracle._seed_state": _tuner_seed_state,
    "omegaconf.Node._get_root": _omegaconf_root,
    "hydra._internal.core_plugins.basic_sweeper.BasicSweeper": _hydra_basic_sweeper,
    "hydra.core.utils.JobReturn._return_value": _hydra_return_value,
    "omegaconf.basecontainer.BaseContainer._resolvers": _omegaconf_resolvers,
    "hydra._internal.hydra.Hydra, hydra._internal.utils.create_config_search_path": (
        _hydra_compose
    ),
    "hydra._internal.utils.create_automatic_config_search_path, "
    "hydra._internal.hydra.Hydra.create_main_hydra2, hydra._internal.callbacks.Callbacks, "
    "hydra._internal.utils.run_and_report": _hydra_run_composed,
    "keras.src.trainers.trainer.Trainer._should_eval": _keras_should_eval,
    "keras.Model._initial_epoch": _keras_initial_epoch,
    "tf.data.Dataset.batch's _batch_size": _tf_batch_size,
}


def test_every_private_name_has_a_probe():
    assert sorted(PROBES) == sorted(name.upstream for name in PRIVATE_NAMES)


@pytest.mark.parametrize("name", PRIVATE_NAMES, ids=lambda name: name.upstream)
def test_private_name_still_upstream(name, tmp_path):
    probe = PROBES[name.upstream]
    arguments = {"tmp_path": tmp_path} if "tmp_path" in probe.__code__.co_varnames else {}
    try:
        probe(**arguments)
    except (UpstreamMoved, AttributeError, ImportError, AssertionError, TypeError) as error:
        pytest.fail(
            f"{name.upstream} moved or changed upstream ({type(error).__name__}: {error}); "
            f"{name.needed_by} needs it ({name.why}). Update kdist.compat for this "
            "Keras/TensorFlow, or pin the versions of constraints.txt."
        )


def test_every_kdist_name_that_needs_one_exists():
    """`needed_by` names real kdist code (it is what an upgrade's message points to)."""
    import importlib
    import re

    def resolves(path: str) -> bool:
        parts = path.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            try:
                for part in parts[i:]:
                    obj = getattr(obj, part)
            except AttributeError:
                return False
            return True
        return False

    names = [
        (path, entry.upstream)
        for entry in PRIVATE_NAMES
        for path in re.findall(r"kdist(?:\.[A-Za-z_]\w*)+", entry.needed_by)
    ]
    assert len(names) >= len(PRIVATE_NAMES)
    missing = [(path, upstream) for path, upstream in names if not resolves(path)]
    assert not missing, f"needed_by names no kdist code: {missing}"


def test_a_moved_name_says_what_and_who():
    with pytest.raises(UpstreamMoved) as caught:
        private_import("keras.src.backend", "no_such_function", "kdist.engine.building")
    message = str(caught.value)
    assert "keras.src.backend.no_such_function" in message
    assert "kdist.engine.building needs it" in message
    assert "Keras 3.15.1" in message
    with pytest.raises(UpstreamMoved, match=r"keras\.Model\._gone.*kdist\.x needs it"):
        private_attribute(_model(), "_gone", "keras.Model._gone", "kdist.x")


def test_moved_compute_output_spec_is_not_swallowed(monkeypatch):
    """`check_inputs` swallows a model's own errors, not a moved Keras name."""
    import keras.src.backend

    from kdist.data.in_hand import check_inputs

    monkeypatch.delattr(keras.src.backend, "compute_output_spec")
    model = SmallSubclassed()
    model(np.zeros((1, 3), "float32"))
    spec = (tf.TensorSpec((3,), tf.float32), tf.TensorSpec((), tf.int32))
    with pytest.raises(UpstreamMoved, match="compute_output_spec"):
        check_inputs(model, spec)


def test_private_names_only_in_compat():
    """`keras.src`, `tensorflow.python`, Hydra's `_internal` (imported, or a class named in
    a config) and the private attributes kdist swaps (OmegaConf's resolver registry,
    Keras's gradient sum) appear in kdist only under kdist/compat/."""
    pattern = (
        r"keras.src\|tensorflow.python\|hydra._internal"
        r"\|\._resolvers\b\|\._all_reduce_sum_gradients"
    )
    found = subprocess.run(
        ["grep", "-rln", pattern, str(KDIST), "--include=*.py"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    outside = sorted(
        str(Path(path).relative_to(KDIST.parent))
        for path in found
        if Path(path).parent != KDIST / "compat"
    )
    assert not outside, f"private Keras/TensorFlow names outside kdist/compat/: {outside}"


def test_compat_imports_nothing_of_kdist():
    """The compatibility package sits below every other: it imports only itself."""
    import ast

    for path in sorted((KDIST / "compat").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith("kdist.") or name.startswith("kdist.compat"), (
                    f"{path.name} imports {name}"
                )


_UPSTREAM_PACKAGES = ("keras", "keras_tuner", "tensorflow", "hydra", "omegaconf")


def _overrides_of_private_upstream_methods() -> dict[str, set[str]]:
    """Every private upstream method that a class of kdist overrides: the public
    `<upstream class>.<name>` of `OVERRIDDEN_HOOKS` -> the kdist classes that define it."""
    import importlib
    import inspect
    import pkgutil

    import kdist

    public = {}  # an upstream class -> its public path, for the classes kdist extends
    for hook in OVERRIDDEN_HOOKS:
        owner, _ = hook.upstream.rsplit(".", 1)
        module, name = owner.rsplit(".", 1)
        public[getattr(importlib.import_module(module), name)] = owner
    found: dict[str, set[str]] = {}
    for info in pkgutil.walk_packages(kdist.__path__, "kdist."):
        if info.name.startswith("kdist.conf") or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            upstream = [b for b in cls.__mro__ if b.__module__.split(".")[0] in _UPSTREAM_PACKAGES]
            kdist_classes = [k for k in cls.__mro__ if k.__module__.startswith("kdist.")]
            for own in kdist_classes:
                for name in vars(own):
                    if not name.startswith("_") or name.startswith("__"):
                        continue
                    owner = next((b for b in upstream if name in vars(b)), None)
                    if owner is not None:
                        path = public.get(owner, f"{owner.__module__}.{owner.__qualname__}")
                        found.setdefault(f"{path}.{name}", set()).add(own.__qualname__)
    return found


def test_every_overridden_private_hook_is_registered_and_still_upstream():
    # An upstream rename of a hook kdist overrides stops the override silently: the
    # registry then lists a hook no kdist class overrides any more, and this fails.
    found = _overrides_of_private_upstream_methods()
    registered = {hook.upstream: hook for hook in OVERRIDDEN_HOOKS}
    unregistered = sorted(set(found) - set(registered))
    assert not unregistered, (
        f"kdist overrides private upstream methods not in OVERRIDDEN_HOOKS: {unregistered}; "
        "add each to kdist.compat.upstream.OVERRIDDEN_HOOKS with why"
    )
    gone = sorted(set(registered) - set(found))
    assert not gone, (
        "; ".join(
            f"{name} is no longer a method of the installed upstream class, so "
            f"{registered[name].needed_by}'s override is never called ({registered[name].why})"
            for name in gone
        )
        + ". Update kdist for this version, or pin the versions of constraints.txt."
    )


def test_a_renamed_hook_fails_the_registry_check(monkeypatch):
    # As after an upgrade that renamed Progbar._format_time: kdist's override stays, but
    # overrides nothing.
    from keras.src.utils import progbar

    monkeypatch.delattr(progbar.Progbar, "_format_time")
    with pytest.raises(AssertionError, match=r"keras.utils.Progbar._format_time is no longer"):
        test_every_overridden_private_hook_is_registered_and_still_upstream()


def _kdist_private_names() -> set[str]:
    """Every `_name` kdist defines: methods, classes, functions, assigned attributes."""
    import ast

    names: set[str] = set()
    for path in KDIST.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", "") == "setattr"
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
            ):
                names.add(str(node.args[1].value))
    return {name for name in names if name.startswith("_")}


def _upstream_private_reads(paths, own: set[str]) -> list[str]:
    """`x._name` and `getattr(x, "_name")` in `paths` whose `_name` is not in `own` (nor
    `self`'s or `cls`'s, nor a `_kdist...` attribute kdist puts on an upstream object)."""
    import ast

    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            name = None
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) not in ("self", "cls"):
                name = node.attr
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", "") in ("getattr", "hasattr", "setattr", "delattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                name = node.args[1].value
            if (
                name is not None
                and name.startswith("_")
                and not name.startswith(("__", "_kdist"))
                and name not in own
            ):
                found.append(f"{path.name}:{node.lineno}: {name}")
    return found


def test_private_attributes_only_in_compat():
    """Outside kdist/compat/, no private attribute of an upstream object is read: every
    `x._name` and `getattr(x, "_name")` names something kdist defines itself (the
    standard library's `os._exit` aside). A read of Keras's, TensorFlow's or a tool's
    private attribute goes through a `kdist.compat` function, registered in
    `PRIVATE_NAMES`; an overridden private method is in `OVERRIDDEN_HOOKS` (above)."""
    paths = [p for p in sorted(KDIST.rglob("*.py")) if (KDIST / "compat") not in p.parents]
    found = _upstream_private_reads(paths, _kdist_private_names() | {"_exit"})
    assert not found, f"upstream private attributes outside kdist/compat/: {found}"


def test_the_private_attribute_check_sees_a_read(tmp_path: Path):
    """The check above finds a read of an upstream private attribute, by either form (the
    two that engine/standard_runner.py and engine/sync/replica_state.py made)."""
    module = tmp_path / "reads.py"
    module.write_text(
        "def f(model, optimizer):\n"
        "    return model._distribute_strategy, getattr(optimizer, '_learning_rate', None)\n"
    )
    found = _upstream_private_reads([module], _kdist_private_names())
    assert found == ["reads.py:2: _distribute_strategy", "reads.py:2: _learning_rate"]
