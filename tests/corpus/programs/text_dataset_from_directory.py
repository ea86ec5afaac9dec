"""keras.io `nlp/text_classification_from_scratch`: text files in `pos/` and `neg/`,
`keras.utils.text_dataset_from_directory(..., validation_split=0.2, subset="training" /
"validation", seed=1337)`, a `TextVectorization` layer applied with `dataset.map`
(vocabulary given, as after `adapt`), an Embedding and a Conv1D classifier. The files are
written by the program, each side in its own folder."""

import keras
import numpy as np
import tensorflow as tf

FIT_KWARGS = {"epochs": 2}
COMPARE = "weights"
WORDS = ["good", "great", "fine", "bad", "awful", "poor", "movie", "plot", "the", "a"]


def _write_texts(folder):
    rng = np.random.default_rng(3)
    for label, name in enumerate(("neg", "pos")):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(30):
            mood = WORDS[:3] if label else WORDS[3:6]
            words = list(rng.choice(mood, size=3)) + list(rng.choice(WORDS[6:], size=5))
            (folder / name / f"{i:03d}.txt").write_text(" ".join(rng.permutation(words)))


def make_data(seed):
    from pathlib import Path

    folder = Path("aclImdb").absolute()
    _write_texts(folder)
    common = {"batch_size": 8, "validation_split": 0.2, "seed": 1337}
    raw_train = keras.utils.text_dataset_from_directory(str(folder), subset="training", **common)
    raw_val = keras.utils.text_dataset_from_directory(str(folder), subset="validation", **common)
    vectorize_layer = keras.layers.TextVectorization(
        vocabulary=WORDS, output_mode="int", output_sequence_length=8
    )

    def vectorize_text(text, label):
        return vectorize_layer(tf.expand_dims(text, -1)), label

    return {
        "x": raw_train.map(vectorize_text).cache().prefetch(2),
        "validation_data": raw_val.map(vectorize_text).cache().prefetch(2),
    }


def make_model():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((8,), dtype="int64")
    x = keras.layers.Embedding(len(WORDS) + 2, 8)(inputs)
    x = keras.layers.Conv1D(8, 3, activation="relu")(x)
    x = keras.layers.GlobalMaxPooling1D()(x)
    predictions = keras.layers.Dense(1, activation="sigmoid", name="predictions")(x)
    model = keras.Model(inputs, predictions)
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    return model
