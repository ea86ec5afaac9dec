"""keras.io `guides/understanding_masking_and_padding` + the IMDB LSTM: padded int
sequences (`keras.utils.pad_sequences`), `Embedding(mask_zero=True)`, an LSTM that
skips the padding, `Dense(1, sigmoid)` and `binary_crossentropy` on float 0/1 labels
(issue 37 item 3)."""

import keras
import numpy as np

VOCAB = 50
FIT_KWARGS = {"epochs": 2, "batch_size": 32, "shuffle": False}
COMPARE = "weights"


def _sequences(n, seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 15, size=n)
    raw = [list(rng.integers(1, VOCAB, size=k)) for k in lengths]
    x = keras.utils.pad_sequences(raw, maxlen=15, padding="post")
    y = np.array([float(np.mean(s) > VOCAB / 2) for s in raw], dtype="float32")
    return x, y


def make_data(seed):
    x, y = _sequences(192, seed)
    return {"x": x, "y": y, "validation_data": _sequences(32, seed + 10)}


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input(shape=(None,), dtype="int32"),
            keras.layers.Embedding(input_dim=VOCAB, output_dim=8, mask_zero=True),
            keras.layers.LSTM(8),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    return model
