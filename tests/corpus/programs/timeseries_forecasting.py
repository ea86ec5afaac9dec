"""keras.io `timeseries/timeseries_weather_forecasting`: windows made by
`keras.utils.timeseries_dataset_from_array` (sequence_length, sampling_rate, a target
offset, batch 32 with a partial last batch), an LSTM regressor with `mse`."""

import keras
import numpy as np

PAST, FUTURE, STEP, BATCH = 24, 6, 2, 32
FIT_KWARGS = {"epochs": 2}
COMPARE = "weights"


def _weather(n, seed):
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype="float32")
    temperature = np.sin(t / 20.0) + 0.1 * rng.normal(size=n)
    pressure = np.cos(t / 35.0) + 0.1 * rng.normal(size=n)
    return np.stack([temperature, pressure], axis=1).astype("float32")


def _dataset(features):
    start = PAST + FUTURE
    x = features[: len(features) - start]
    y = features[start:, :1]
    return keras.utils.timeseries_dataset_from_array(
        x,
        y,
        sequence_length=PAST // STEP,
        sampling_rate=STEP,
        batch_size=BATCH,
    )


def make_data(seed):
    return {
        "x": _dataset(_weather(400, seed)),
        "validation_data": _dataset(_weather(120, seed + 1)),
    }


def make_model():
    keras.utils.set_random_seed(1)
    inputs = keras.layers.Input(shape=(PAST // STEP, 2))
    lstm_out = keras.layers.LSTM(8)(inputs)
    outputs = keras.layers.Dense(1)(lstm_out)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3), loss="mse")
    return model
