"""keras.io `structured_data/structured_data_classification_with_feature_space`: a
`keras.utils.FeatureSpace` adapted on a `tf.data.Dataset` of dicts, applied in the
dataset's `map`, batched by the user (32, with a partial last batch); the model trains on
the encoded features from the dataset."""

import keras
import numpy as np
import tensorflow as tf
from keras.utils import FeatureSpace

FIT_KWARGS = {"epochs": 2}
COMPARE = "weights"


def _frame(n, seed):
    rng = np.random.default_rng(seed)
    columns = {
        "age": rng.uniform(30, 75, size=n).astype("float32"),
        "trestbps": rng.uniform(90, 180, size=n).astype("float32"),
        "sex": rng.integers(0, 2, size=n),
        "thal": rng.choice(["normal", "fixed", "reversible"], size=n),
    }
    target = ((columns["age"] > 55) ^ (columns["sex"] == 1)).astype("int64")
    return columns, target


def _feature_space():
    train, _ = _frame(200, 0)
    feature_space = FeatureSpace(
        features={
            "sex": FeatureSpace.integer_categorical(num_oov_indices=0),
            "thal": FeatureSpace.string_categorical(num_oov_indices=0),
            "age": FeatureSpace.float_normalized(),
            "trestbps": FeatureSpace.float_normalized(),
        },
        output_mode="concat",
    )
    feature_space.adapt(tf.data.Dataset.from_tensor_slices(train).batch(32))
    return feature_space


def make_data(seed):
    feature_space = _feature_space()

    def dataset(n, s):
        frame, target = _frame(n, s)
        ds = tf.data.Dataset.from_tensor_slices((frame, target)).batch(32)
        return ds.map(lambda x, y: (feature_space(x), y)).prefetch(tf.data.AUTOTUNE)

    return {"x": dataset(200, seed), "validation_data": dataset(40, seed + 10)}


def make_model():
    keras.utils.set_random_seed(1)
    width = 2 + 3 + 1 + 1  # sex one-hot, thal one-hot, two normalized floats
    encoded_features = keras.Input(shape=(width,))
    x = keras.layers.Dense(16, activation="relu")(encoded_features)
    x = keras.layers.Dropout(0.5)(x)
    predictions = keras.layers.Dense(1, activation="sigmoid")(x)
    model = keras.Model(inputs=encoded_features, outputs=predictions)
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    return model
