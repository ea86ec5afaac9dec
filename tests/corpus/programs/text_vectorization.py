"""keras.io `nlp/text_classification_from_scratch`, end to end: datasets of (texts, labels)
batches, a TextVectorization layer adapted on the training texts inside the model,
Embedding + Conv1D + GlobalMaxPooling1D, `Dense(1, sigmoid)` with `binary_crossentropy` on
float 0/1 labels (issue 37 item 3)."""

import keras
import numpy as np
import tensorflow as tf

WORDS = ["good", "great", "fine", "bad", "awful", "poor", "movie", "plot", "the", "a"]
FIT_KWARGS = {"epochs": 2}
COMPARE = "weights"
# String features in the model: Keras's own fit under MirroredStrategy fails ("Value for
# attr 'T' of string is not in the list of allowed values", a string tensor where the
# distributed step wants numbers); kdist trains it.
KERAS_MIRRORED_FAILS = "string inputs: Keras's fit under MirroredStrategy cannot run them"
EVALUATE = True


def _reviews(n, seed):
    rng = np.random.default_rng(seed)
    words = np.array(WORDS)[rng.integers(0, len(WORDS), size=(n, 12))]
    texts = np.array([" ".join(w) for w in words])
    positive = np.isin(words, WORDS[:3]).sum(1) > np.isin(words, WORDS[3:6]).sum(1)
    return texts, positive.astype("float32")


def _dataset(n, seed):
    # keras.io reads text_dataset_from_directory(batch_size=32): (texts, labels) batches.
    return tf.data.Dataset.from_tensor_slices(_reviews(n, seed)).batch(32)


def make_data(seed):
    return {"x": _dataset(224, seed), "validation_data": _dataset(32, seed + 10)}


def make_test_data(seed):
    return _dataset(48, seed), None


def make_model():
    keras.utils.set_random_seed(1)
    vectorize_layer = keras.layers.TextVectorization(
        max_tokens=32, output_mode="int", output_sequence_length=16
    )
    vectorize_layer.adapt(tf.data.Dataset.from_tensor_slices(_reviews(224, 0)[0]).batch(32))
    inputs = keras.Input(shape=(1,), dtype="string")
    x = vectorize_layer(inputs)
    x = keras.layers.Embedding(32, 8)(x)
    x = keras.layers.Dropout(0.5)(x)
    x = keras.layers.Conv1D(8, 3, padding="valid", activation="relu", strides=1)(x)
    x = keras.layers.GlobalMaxPooling1D()(x)
    x = keras.layers.Dense(8, activation="relu")(x)
    predictions = keras.layers.Dense(1, activation="sigmoid", name="predictions")(x)
    model = keras.Model(inputs, predictions)
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    return model
