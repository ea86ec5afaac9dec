"""What the user's data code raised inside TensorFlow's input pipeline, said once.

A `PyDataset` or a generator given to `fit` is read by `tf.data.Dataset.from_generator`,
which runs it in a `py_func`: whatever it raises reaches the training loop as a
`tf.errors.InvalidArgumentError` ("Graph execution error") that repeats the Python
traceback. The pipeline records the one-line `ConfigError` it made of the user's
exception (`remember`) and `data_errors` raises that line in place of TensorFlow's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import tensorflow as tf

from kdist.config.errors import ConfigError

__all__ = ["data_errors", "remember"]

# The errors recorded since the last `data_errors` began; tf.data runs the generators
# on its own threads.
_recorded: list[ConfigError] = []
_lock = threading.Lock()


def remember(error: ConfigError) -> ConfigError:
    """Record `error`, raised by the user's data inside the input pipeline; returns it."""
    with _lock:
        _recorded.append(error)
    return error


@contextmanager
def data_errors() -> Iterator[None]:
    """Raise the user's data error, as its one line, where TensorFlow wraps it.

    Raises:
        ConfigError: the first recorded error whose line TensorFlow's error carries.
    """
    with _lock:
        _recorded.clear()
    try:
        yield
    except tf.errors.OpError as error:
        with _lock:
            mine = next((e for e in _recorded if str(e) in error.message), None)
            _recorded.clear()
        if mine is None:
            raise
        raise mine from None
