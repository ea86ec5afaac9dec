"""keras.io `vision/image_classification_from_scratch`: PNG files in one folder per class,
`keras.utils.image_dataset_from_directory(..., validation_split=0.2, subset="both",
seed=1337, image_size=..., batch_size=...)`, a Rescaling layer in the model, `fit` on the
training dataset with the validation one. The files are written by the program (each
side in its own folder). The dataset reshuffles each epoch (seeded): kdist must iterate
it as `fit` does (issue 42 item 5: no pass over it before training)."""

import keras
import numpy as np

FIT_KWARGS = {"epochs": 2}
COMPARE = "weights"
CLASSES = ("cat", "dog")


def _write_images(folder):
    rng = np.random.default_rng(7)
    for label, name in enumerate(CLASSES):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(20):
            image = rng.integers(0, 200, size=(16, 16, 3)).astype("uint8")
            image[..., label] = np.minimum(image[..., label] + 55, 255)
            keras.utils.save_img(str(folder / name / f"{i:03d}.png"), image)


def make_data(seed):
    from pathlib import Path

    folder = Path("PetImages").absolute()
    _write_images(folder)
    train_ds, val_ds = keras.utils.image_dataset_from_directory(
        str(folder),
        validation_split=0.2,
        subset="both",
        seed=1337,
        image_size=(16, 16),
        batch_size=8,
    )
    return {"x": train_ds, "validation_data": val_ds}


def make_model():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Rescaling(1.0 / 255)(inputs)
    x = keras.layers.Conv2D(8, 3, strides=2, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(1, activation=None)(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[keras.metrics.BinaryAccuracy(name="acc")],
    )
    return model
