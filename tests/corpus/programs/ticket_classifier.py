"""keras.io's functional-API guide, "models with multiple inputs and outputs": title and
body token sequences and a tags vector in, a priority score and a department out; losses
and loss weights per output by name; `x` and `y` dicts keyed by input and output name."""

import keras
import numpy as np
from keras import layers

NUM_TAGS, NUM_WORDS, NUM_DEPARTMENTS = 6, 50, 3
FIT_KWARGS = {"epochs": 2, "batch_size": 32, "shuffle": False}
COMPARE = "weights"
PREDICT = True


def _tickets(n, seed):
    rng = np.random.default_rng(seed)
    title = rng.integers(0, NUM_WORDS, size=(n, 6))
    body = rng.integers(0, NUM_WORDS, size=(n, 20))
    tags = rng.integers(0, 2, size=(n, NUM_TAGS)).astype("float32")
    priority = rng.random(size=(n, 1)).astype("float32")
    department = rng.integers(0, 2, size=(n, NUM_DEPARTMENTS)).astype("float32")
    return {"title": title, "body": body, "tags": tags}, {
        "priority": priority,
        "department": department,
    }


def make_data(seed):
    x, y = _tickets(160, seed)
    return {"x": x, "y": y}


def make_test_data(seed):
    return _tickets(32, seed)


def make_model():
    keras.utils.set_random_seed(1)
    title_input = keras.Input(shape=(None,), name="title")
    body_input = keras.Input(shape=(None,), name="body")
    tags_input = keras.Input(shape=(NUM_TAGS,), name="tags")
    title_features = layers.Embedding(NUM_WORDS, 8)(title_input)
    body_features = layers.Embedding(NUM_WORDS, 8)(body_input)
    title_features = layers.LSTM(8)(title_features)
    body_features = layers.LSTM(4)(body_features)
    x = layers.concatenate([title_features, body_features, tags_input])
    priority_pred = layers.Dense(1, name="priority")(x)
    department_pred = layers.Dense(NUM_DEPARTMENTS, name="department")(x)
    model = keras.Model(
        inputs=[title_input, body_input, tags_input],
        outputs={"priority": priority_pred, "department": department_pred},
    )
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss={
            "priority": keras.losses.BinaryCrossentropy(from_logits=True),
            "department": keras.losses.CategoricalCrossentropy(from_logits=True),
        },
        loss_weights={"priority": 1.0, "department": 0.2},
    )
    return model
