"""Loading and serving what a run exports: `model.keras` (safe mode only) and `saved_model/`.

A run writes `model.keras` (the Keras model, to evaluate or fine-tune) and `saved_model/`
(a TensorFlow SavedModel whose `serving_default` signature maps a batch of inputs to the
model's outputs, for TF Serving or `tf.saved_model.load`). Reading a `.keras` file always
uses Keras safe mode, which refuses to deserialize code (e.g. `Lambda` layers); no
argument or config turns it off, and legacy HDF5 (`.h5`) full models are refused.

A `model.keras` is a zip archive, and a planted one may be a bomb (a few MB on disk whose
`config.json` inflates to gigabytes). Before anything reads a member, every member's
declared size is checked (`check_archive`): `config.json` and `metadata.json` may hold at
most `MAX_CONFIG_BYTES`, and any member larger than `BOMB_FLOOR_BYTES` at most
`MAX_EXPANSION` times its compressed size (Keras stores its members uncompressed); the
config is then read with the same cap on the bytes actually inflated. A file over a limit
is refused in one line naming the file, the member and the limit.

Example:

```python
model = kdist.evaluation.export.load_model("outputs/2026-11-21/10-00-00/model.keras")
serve = kdist.evaluation.export.load_serving("outputs/2026-11-21/10-00-00/saved_model")
logits = serve(images)
```
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from kdist.compat.keras_private import safe_mode_scope
from kdist.config.errors import ConfigError

__all__ = [
    "BOMB_FLOOR_BYTES",
    "LEGACY_SUFFIXES",
    "MAX_CONFIG_BYTES",
    "MAX_EXPANSION",
    "SIGNATURE",
    "check_archive",
    "load_model",
    "load_serving",
]

LEGACY_SUFFIXES = (".h5", ".hdf5", ".keras.h5")
SIGNATURE = "serving_default"
# The JSON members of a `.keras` archive: a model's config is kilobytes to a few MB.
CONFIG_MEMBERS = ("config.json", "metadata.json")
MAX_CONFIG_BYTES = 32 * 2**20
# Past this size a member (the weights) may be at most `MAX_EXPANSION` times its size in
# the archive; Keras refuses the same past 4 GiB, after kdist has read the config.
BOMB_FLOOR_BYTES = 256 * 2**20
MAX_EXPANSION = 100


def load_model(path: str | os.PathLike[str]) -> keras.Model:
    """Load a `.keras` model in Keras safe mode, without its optimizer state.

    Call it inside `strategy.scope()` to get distributed variables. Usable as a
    `model._target_` to start from a saved model (`+model.path=...`).

    Args:
        path: a `.keras` file.

    Returns:
        The `keras.Model` (not compiled).

    Raises:
        ConfigError: naming the path when it is missing, a legacy HDF5 file, a
            SavedModel folder, or a model that needs unsafe deserialization.
    """
    target = Path(os.path.expanduser(str(path)))
    if target.name.lower().endswith(LEGACY_SUFFIXES):
        raise ConfigError(
            str(path),
            "legacy HDF5 full-model loading is refused: it has no safe mode",
            hint="re-save the model as .keras (model.save('model.keras')) where you trust it",
        )
    if target.is_dir():
        raise ConfigError(
            str(path),
            "is a folder (a SavedModel?); load_model reads .keras files",
            hint="serve a SavedModel with kdist.evaluation.export.load_serving or "
            "tf.saved_model.load",
        )
    if not target.is_file():
        raise ConfigError(str(path), "no such model file")
    if target.suffix != ".keras":
        raise ConfigError(str(path), "is not a .keras file", hint="give the run's model.keras")
    check_archive(target, key=str(path))
    if _has_python_lambda(target):
        raise ConfigError(
            str(path),
            "needs unsafe deserialization (a Python lambda), which kdist refuses",
            hint="replace Lambda layers with registered custom layers and re-save",
        )
    try:
        # Keras lets keras.config.enable_unsafe_deserialization() anywhere in the process
        # override safe_mode=True; the scope sets safe mode back for this load.
        with safe_mode_scope():
            return keras.models.load_model(target, compile=False, safe_mode=True)
    except ValueError as error:
        if "safe_mode" in str(error) or "unsafe" in str(error).lower():
            raise ConfigError(
                str(path),
                "needs unsafe deserialization (e.g. a Lambda layer), which kdist refuses",
                hint="replace Lambda layers with registered custom layers and re-save",
            ) from None
        raise _unreadable(path, error) from None
    except Exception as error:  # a truncated or foreign file: zipfile, h5py, JSON errors
        raise _unreadable(path, error) from None


def _unreadable(path: str | os.PathLike[str], error: Exception) -> ConfigError:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return ConfigError(
        str(path),
        f"is not a readable Keras model ({type(error).__name__}: {first[:200]})",
        hint="re-save the model with model.save('model.keras'), or train the run again",
    )


def _too_large(key: str, member: str, problem: str) -> ConfigError:
    return ConfigError(
        key,
        f"{member} in the archive {problem}, which kdist does not read (a zip bomb?)",
        hint="use a model.keras you saved yourself, or train the run again",
    )


def check_archive(path: Path, *, key: str) -> None:
    """Refuse a `.keras` archive whose members declare more than kdist reads.

    Args:
        path: the archive.
        key: the argument that named it, for the message.

    Raises:
        ConfigError: naming `key`, the member and the limit (`MAX_CONFIG_BYTES` for the
            JSON members; `MAX_EXPANSION` times its compressed size for any member over
            `BOMB_FLOOR_BYTES`).
    """
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # not a readable archive: Keras says so
    for info in members:
        if info.filename in CONFIG_MEMBERS and info.file_size > MAX_CONFIG_BYTES:
            raise _too_large(
                key,
                info.filename,
                f"declares {info.file_size} bytes (the limit is {MAX_CONFIG_BYTES} bytes)",
            )
        if info.file_size > BOMB_FLOOR_BYTES and info.file_size > MAX_EXPANSION * max(
            info.compress_size, 1
        ):
            raise _too_large(
                key,
                info.filename,
                f"declares {info.file_size} bytes from {info.compress_size} compressed "
                f"(the limit is {MAX_EXPANSION} times past {BOMB_FLOOR_BYTES} bytes)",
            )


def _read_member(archive: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """Member `name` of `archive`, inflating at most `limit + 1` bytes of it."""
    with archive.open(name) as member:
        data = member.read(limit + 1)
    if len(data) > limit:
        raise _too_large(str(archive.filename), name, f"inflates past the limit of {limit} bytes")
    return data


def _has_python_lambda(path: Path) -> bool:
    """Whether a `.keras` archive's config holds a serialized Python lambda."""
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(_read_member(archive, "config.json", MAX_CONFIG_BYTES))
    except (zipfile.BadZipFile, KeyError, ValueError) as error:
        if isinstance(error, ConfigError):
            raise
        return False  # not a readable archive: let Keras report it

    def walk(node: Any) -> bool:
        if isinstance(node, dict):
            if node.get("class_name") == "__lambda__":
                return True
            return any(walk(value) for value in node.values())
        if isinstance(node, list):
            return any(walk(value) for value in node)
        return False

    return walk(config)


def load_serving(path: str | os.PathLike[str]) -> Callable[..., dict[str, Any]]:
    """The `serving_default` signature of an exported `saved_model/` folder.

    Args:
        path: the SavedModel folder.

    Returns:
        A function from a batch of inputs (a tensor) to `{output name: tensor}`.

    Raises:
        ConfigError: naming the path when it is not a SavedModel with that signature.
    """
    folder = Path(os.path.expanduser(str(path)))
    if not (folder / "saved_model.pb").is_file():
        raise ConfigError(str(path), "is not a SavedModel folder (no saved_model.pb)")
    loaded = tf.saved_model.load(str(folder))
    if SIGNATURE not in loaded.signatures:
        raise ConfigError(
            str(path),
            f"has no {SIGNATURE} signature",
            hint=f"signatures: {', '.join(loaded.signatures) or 'none'}",
        )
    signature = loaded.signatures[SIGNATURE]
    _, keywords = signature.structured_input_signature
    names = list(keywords)

    def serve(inputs: Any) -> dict[str, Any]:
        if len(names) != 1:
            raise ValueError(f"the signature takes {names}; call it with those keywords")
        spec = keywords[names[0]]
        return dict(signature(**{names[0]: tf.convert_to_tensor(inputs, spec.dtype)}))

    # Keep the loaded object alive as long as the function is.
    serve.saved_model = loaded  # type: ignore[attr-defined]
    return serve
