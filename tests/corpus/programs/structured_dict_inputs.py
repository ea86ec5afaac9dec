"""keras.io `structured_data/structured_data_classification_from_scratch`: one named
`keras.Input` per column (numeric, string, integer categorical), encoded by Normalization,
StringLookup and IntegerLookup layers adapted on the training data; a `tf.data.Dataset`
of (dict keyed by input name, target) batches, `Dense(1, sigmoid)` with
`binary_crossentropy`; then `evaluate` and `predict` on a dict of tensors."""

import keras
import numpy as np
import tensorflow as tf

FIT_KWARGS = {"epochs": 2}
COMPARE = "weights"
# String features in the model: Keras's own fit under MirroredStrategy fails ("Value for
# attr 'T' of string is not in the list of allowed values", a string tensor where the
# distributed step wants numbers); kdist trains it.
KERAS_MIRRORED_FAILS = "string inputs: Keras's fit under MirroredStrategy cannot run them"
PREDICT = EVALUATE = True


def _heart(n, seed):
    rng = np.random.default_rng(seed)
    age = rng.uniform(30, 75, size=(n, 1)).astype("float32")
    chol = rng.uniform(150, 350, size=(n, 1)).astype("float32")
    thal = rng.choice(["normal", "fixed", "reversible"], size=(n, 1))
    cp = rng.integers(0, 4, size=(n, 1))
    target = ((age[:, 0] > 55) | (thal[:, 0] == "reversible")).astype("int64")
    return {"age": age, "chol": chol, "thal": thal, "cp": cp}, target


def dataframe_to_dataset(n, seed):
    features, target = _heart(n, seed)
    return tf.data.Dataset.from_tensor_slices((features, target)).batch(32)


def make_data(seed):
    return {
        "x": dataframe_to_dataset(200, seed),
        "validation_data": dataframe_to_dataset(40, seed + 10),
    }


def make_test_data(seed):
    # keras.io predicts on a dict of tensors keyed by input name.
    features, target = _heart(40, seed)
    return {k: tf.convert_to_tensor(v) for k, v in features.items()}, target


def make_model():
    keras.utils.set_random_seed(1)
    train, _ = _heart(200, 0)
    age, chol = keras.Input(shape=(1,), name="age"), keras.Input(shape=(1,), name="chol")
    thal = keras.Input(shape=(1,), name="thal", dtype="string")
    cp = keras.Input(shape=(1,), name="cp", dtype="int64")
    encoded = []
    for inp, name in [(age, "age"), (chol, "chol")]:
        normalizer = keras.layers.Normalization()
        normalizer.adapt(train[name])
        encoded.append(normalizer(inp))
    thal_lookup = keras.layers.StringLookup(output_mode="one_hot")
    thal_lookup.adapt(train["thal"])
    encoded.append(thal_lookup(thal))
    cp_lookup = keras.layers.IntegerLookup(output_mode="one_hot")
    cp_lookup.adapt(train["cp"])
    encoded.append(cp_lookup(cp))
    x = keras.layers.concatenate(encoded)
    x = keras.layers.Dense(16, activation="relu")(x)
    x = keras.layers.Dropout(0.5)(x)
    output = keras.layers.Dense(1, activation="sigmoid")(x)
    model = keras.Model({"age": age, "chol": chol, "thal": thal, "cp": cp}, output)
    model.compile("adam", "binary_crossentropy", metrics=["accuracy"])
    return model
