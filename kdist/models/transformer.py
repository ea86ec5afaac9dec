"""A small Transformer encoder that classifies sequences of token ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from kdist.models.checks import check_dropout, check_num_classes, check_positive

__all__ = ["PaddingMask", "PositionEmbedding", "transformer"]


@keras.saving.register_keras_serializable(package="kdist")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned embedding of each position to a sequence of vectors.

    Registered with Keras so a saved `model.keras` reloads in safe mode.

    Args:
        sequence_length: the longest sequence the layer accepts.
        **kwargs: `keras.layers.Layer` arguments (name, dtype, ...).
    """

    def __init__(self, sequence_length: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.sequence_length = check_positive("sequence_length", sequence_length)

    def build(self, input_shape: Sequence[int | None]) -> None:
        self.position_embeddings = self.add_weight(
            shape=(self.sequence_length, int(input_shape[-1])),  # type: ignore[arg-type]
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="position_embeddings",
        )

    def call(self, inputs: Any) -> Any:
        length = ops.shape(inputs)[1]
        positions = ops.cast(self.position_embeddings[:length], inputs.dtype)
        return inputs + positions[None, :, :]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "sequence_length": self.sequence_length}


@keras.saving.register_keras_serializable(package="kdist")
class PaddingMask(keras.layers.Layer):
    """Token ids `(batch, length)` -> a bool mask of the positions that are not padding (id 0).

    With `attention=True` the mask has shape `(batch, 1, length)`, the keys every query
    may attend to, for `MultiHeadAttention(attention_mask=...)`.

    Args:
        attention: add the query axis. Defaults to `False`.
        **kwargs: `keras.layers.Layer` arguments.
    """

    def __init__(self, attention: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.attention = bool(attention)

    def call(self, tokens: Any) -> Any:
        mask = ops.not_equal(tokens, 0)
        return mask[:, None, :] if self.attention else mask

    def compute_output_shape(self, input_shape: Sequence[int | None]) -> tuple[int | None, ...]:
        shape = tuple(input_shape)
        return (shape[0], 1, *shape[1:]) if self.attention else shape

    def compute_output_spec(self, tokens: Any) -> Any:
        return keras.KerasTensor(self.compute_output_shape(tokens.shape), dtype="bool")

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "attention": self.attention}


def _encoder_block(
    x: keras.KerasTensor,
    *,
    num_heads: int,
    ff_dim: int,
    dropout: float,
    attention_mask: keras.KerasTensor | None,
    name: str,
) -> keras.KerasTensor:
    embed_dim = int(x.shape[-1])
    attention = keras.layers.MultiHeadAttention(
        num_heads, key_dim=embed_dim // num_heads, dropout=dropout, name=f"{name}_attention"
    )(x, x, attention_mask=attention_mask)
    attention = keras.layers.Dropout(dropout, name=f"{name}_attention_dropout")(attention)
    x = keras.layers.Add(name=f"{name}_attention_add")([x, attention])
    x = keras.layers.LayerNormalization(epsilon=1e-6, name=f"{name}_attention_norm")(x)
    ff = keras.layers.Dense(ff_dim, activation="gelu", name=f"{name}_ff1")(x)
    ff = keras.layers.Dense(embed_dim, name=f"{name}_ff2")(ff)
    ff = keras.layers.Dropout(dropout, name=f"{name}_ff_dropout")(ff)
    x = keras.layers.Add(name=f"{name}_ff_add")([x, ff])
    return keras.layers.LayerNormalization(epsilon=1e-6, name=f"{name}_ff_norm")(x)


def transformer(
    *,
    input_shape: Sequence[int],
    num_classes: int,
    vocab_size: int = 1000,
    embed_dim: int = 64,
    num_heads: int = 4,
    ff_dim: int = 128,
    num_layers: int = 2,
    dropout: float = 0.1,
    mask_padding: bool = True,
) -> keras.Model:
    """A Transformer encoder text classifier on integer token ids, with float32 logits.

    Token and learned position embeddings, `num_layers` post-norm encoder blocks
    (multi-head self-attention and a GELU feed-forward layer), mean pooling over the
    sequence, and a dense layer of logits.

    Args:
        input_shape: `(sequence_length,)`: one example is a sequence of token ids.
        num_classes: number of output logits.
        vocab_size: token ids are in `[0, vocab_size)`. Defaults to `1000`.
        embed_dim: width of the embeddings and of every block. Defaults to `64`.
        num_heads: attention heads; must divide `embed_dim`. Defaults to `4`.
        ff_dim: width of the feed-forward layers. Defaults to `128`.
        num_layers: encoder blocks. Defaults to `2`.
        dropout: dropout rate in the blocks. Defaults to `0.1`.
        mask_padding: treat token id 0 as padding: it is not attended to and not pooled
            (sequences must not be all padding).
            Defaults to `True`.

    Returns:
        An uncompiled `keras.Model` whose input is an `int32` tensor.

    Raises:
        ValueError: for an input that is not a sequence or inconsistent sizes.

    Example:

    ```python
    model = kdist.models.transformer(input_shape=(64,), num_classes=4, vocab_size=500)
    ```
    """
    shape = tuple(int(d) for d in input_shape)
    if len(shape) != 1:
        raise ValueError(
            f"`input_shape` ({shape}) must be (sequence_length,) for transformer: it reads "
            "token ids (e.g. data=synthetic_text), not images or feature vectors."
        )
    check_num_classes(num_classes)
    if vocab_size < 2:
        raise ValueError(f"`vocab_size` ({vocab_size}) must be at least 2.")
    if embed_dim < 1 or num_heads < 1 or embed_dim % num_heads:
        raise ValueError(
            f"`embed_dim` ({embed_dim}) must be a positive multiple of `num_heads` ({num_heads})."
        )
    if num_layers < 1 or ff_dim < 1:
        raise ValueError(
            f"`num_layers` ({num_layers}) and `ff_dim` ({ff_dim}) must be positive integers."
        )
    check_dropout(dropout)
    inputs = keras.Input(shape=shape, dtype="int32", name="tokens")
    # Explicit masks: Keras's implicit mask propagation stops at MultiHeadAttention.
    attention_mask = (
        PaddingMask(attention=True, name="attention_mask")(inputs) if mask_padding else None
    )
    x = keras.layers.Embedding(vocab_size, embed_dim, name="token_embedding")(inputs)
    x = PositionEmbedding(shape[0], name="position_embedding")(x)
    x = keras.layers.Dropout(dropout, name="embedding_dropout")(x)
    for i in range(num_layers):
        x = _encoder_block(
            x,
            num_heads=num_heads,
            ff_dim=ff_dim,
            dropout=dropout,
            attention_mask=attention_mask,
            name=f"block{i + 1}",
        )
    if mask_padding:
        x = keras.layers.GlobalAveragePooling1D(name="pool")(
            x, mask=PaddingMask(name="pool_mask")(inputs)
        )
    else:
        x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    # Logits stay float32 under a mixed-precision policy so the loss is computed stably.
    outputs = keras.layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="transformer")
