"""keras.io `guides/transfer_learning`, the end-to-end example: a base frozen
(`base_model.trainable = False`), the head trained with `fit`; then the base unfrozen
(`base_model.trainable = True`), the model recompiled with `Adam(1e-5)` and trained again
(issue 42 item 1: the second `fit` must train all 6 variables with the new optimizer)."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 2, "batch_size": 16, "shuffle": False}
COMPARE = "weights"
EVALUATE = True


def _images(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=n)
    x = rng.normal(size=(n, 12, 12, 3)).astype("float32")
    x[labels == 1] += 0.5
    return x, labels.astype("float32")


def make_data(seed):
    x, y = _images(96, seed)
    return {"x": x, "y": y, "validation_data": _images(32, seed + 10)}


def make_test_data(seed):
    return _images(32, seed)


def make_model():
    keras.utils.set_random_seed(1)
    base_inputs = keras.Input((12, 12, 3))
    features = keras.layers.Conv2D(8, 3, activation="relu")(base_inputs)
    features = keras.layers.Conv2D(8, 3, activation="relu")(features)
    base_model = keras.Model(base_inputs, features, name="base_model")
    base_model.trainable = False
    inputs = keras.Input((12, 12, 3))
    x = base_model(inputs, training=False)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(1)(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[keras.metrics.BinaryAccuracy()],
    )
    return model


def _unfreeze_and_recompile(model):
    model.get_layer("base_model").trainable = True
    model.compile(
        optimizer=keras.optimizers.Adam(1e-5),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[keras.metrics.BinaryAccuracy()],
    )


def fit_keras(model, kwargs):
    model.fit(verbose=0, **kwargs)
    # The new optimizer belongs to the model's strategy (Keras's mirrored judge too).
    with model.distribute_strategy.scope():
        _unfreeze_and_recompile(model)
    return model.fit(verbose=0, **kwargs)


def fit_kdist(exp, kwargs):
    exp.fit(verbose=0, **kwargs)
    with exp.strategy.scope():
        _unfreeze_and_recompile(exp.model)
    return exp.fit(verbose=0, **kwargs)


def check(reference, ours):
    trainable = len(ours.model.trainable_weights)
    assert trainable == len(reference.model.trainable_weights) == 6, trainable
    lr = float(keras.ops.convert_to_numpy(ours.model.optimizer.learning_rate))
    assert abs(lr - 1e-5) < 1e-12, f"phase 2 trained with learning rate {lr}, not 1e-5"
