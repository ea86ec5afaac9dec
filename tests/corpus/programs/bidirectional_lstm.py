"""keras.io `nlp/bidirectional_lstm_imdb`: Embedding, two stacked Bidirectional LSTMs,
`Dense(1, sigmoid)`, `binary_crossentropy` on int 0/1 labels, `validation_data`."""

import keras
import numpy as np

MAX_FEATURES, MAXLEN = 40, 20
FIT_KWARGS = {"epochs": 2, "batch_size": 32, "shuffle": False}
COMPARE = "weights"


def _imdb(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(1, MAX_FEATURES, size=(n, MAXLEN))
    return x, (x[:, :5].mean(1) > MAX_FEATURES / 2).astype("int64")


def make_data(seed):
    x, y = _imdb(160, seed)
    return {"x": x, "y": y, "validation_data": _imdb(32, seed + 10)}


def make_model():
    keras.utils.set_random_seed(1)
    inputs = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(MAX_FEATURES, 8)(inputs)
    x = keras.layers.Bidirectional(keras.layers.LSTM(8, return_sequences=True))(x)
    x = keras.layers.Bidirectional(keras.layers.LSTM(8))(x)
    outputs = keras.layers.Dense(1, activation="sigmoid")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    return model
