"""The model zoo: ResNet-20/56 and ResNet-50 shapes, the transformer trains on token ids.

Cost: about 15 s (ResNet-50 is built once, never trained).
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
from helpers import compose

import kdist
from kdist.config.errors import ConfigError
from kdist.evaluation.export import load_model


@pytest.fixture(autouse=True)
def _float32_policy():
    yield
    keras.mixed_precision.set_global_policy("float32")


def _convs(model: keras.Model) -> list[keras.layers.Conv2D]:
    return [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]


@pytest.mark.parametrize(("variant", "depth"), [("resnet20", 20), ("resnet56", 56)])
def test_cifar_resnet_depth(variant: str, depth: int):
    model = kdist.models.build("resnet", input_shape=(32, 32, 3), num_classes=10, variant=variant)
    main_path = [c for c in _convs(model) if not c.name.endswith("_proj")]
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    # 6n+2 weighted layers: the stem, 6n convolutions in blocks, the classifier.
    assert len(main_path) + len(dense) == depth
    assert {c.filters for c in main_path} == {16, 32, 64}
    assert model.output_shape == (None, 10)
    assert len(model.losses) == len(_convs(model))  # L2 weight decay on every kernel


def test_resnet50_from_keras_applications_without_weights():
    model = kdist.models.resnet(input_shape=(32, 32, 3), num_classes=7, variant="resnet50")
    backbone = model.get_layer("resnet50")
    assert 23_000_000 < backbone.count_params() < 24_000_000
    assert model.output_shape == (None, 7)
    with pytest.raises(ValueError, match="at least 32x32"):
        kdist.models.resnet(input_shape=(16, 16, 3), num_classes=7, variant="resnet50")


def test_logits_are_float32_under_mixed_precision():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    for model in (
        kdist.models.resnet(input_shape=(8, 8, 3), num_classes=4),
        kdist.models.transformer(input_shape=(12,), num_classes=4, embed_dim=16, num_heads=2),
    ):
        assert model.layers[-1].compute_dtype == "float32"
        weighted = [layer for layer in model.layers[1:-1] if layer.weights]
        assert weighted and all(layer.compute_dtype == "bfloat16" for layer in weighted)
        x = np.ones((2, *model.input_shape[1:]), model.inputs[0].dtype)
        assert model(x).dtype == "float32"


def test_bad_model_config_is_named(tmp_path: Path):
    cfg = compose(["model=resnet", "model.variant=resnet18", f"run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"model\.variant='resnet18'.*resnet20, resnet32"):
        kdist.Experiment(cfg)
    with pytest.raises(ValueError, match=r"token ids.*synthetic_text"):
        kdist.models.transformer(input_shape=(8, 8, 1), num_classes=10)
    with pytest.raises(ValueError, match="multiple of `num_heads`"):
        kdist.models.transformer(input_shape=(8,), num_classes=2, embed_dim=10, num_heads=4)


def test_transformer_trains_on_synthetic_tokens(tmp_path: Path):
    cfg = compose(
        [
            "model=transformer",
            "model.embed_dim=32",
            "model.num_heads=2",
            "model.ff_dim=64",
            "model.num_layers=1",
            "data=synthetic_text",
            "data.source.num_train=1024",
            "data.source.num_validation=256",
            "data.source.sequence_length=24",
            "data.source.vocab_size=300",
            "data.source.min_length=8",
            "trainer.epochs=1",
            "trainer.global_batch_size=32",
            "trainer.steps_per_execution=8",
            "trainer.verbose=0",
            "callbacks=minimal",
            f"run_dir={tmp_path}",
        ]
    )
    # The vocabulary size follows the data's.
    assert cfg.model.vocab_size == 300
    exp = kdist.Experiment(cfg)
    x, _ = exp.source.arrays("train")
    assert x.dtype == np.int32 and (x == 0).any() and x.max() < 300  # padded sequences
    exp.fit()
    assert exp.metrics()["validation"]["accuracy"] > 0.9


def test_transformer_ignores_padding_and_reloads_in_safe_mode(tmp_path: Path):
    model = kdist.models.transformer(
        input_shape=(6,), num_classes=3, vocab_size=50, embed_dim=8, num_heads=2, dropout=0.0
    )
    tokens = np.array([[5, 9, 7, 0, 0, 0]], np.int32)
    # A padded position has no effect on the output: the embedding of id 0 is masked out.
    embedding = model.get_layer("token_embedding")
    before = model(tokens).numpy()
    weights = embedding.get_weights()[0].copy()
    weights[0] += 10.0
    embedding.set_weights([weights])
    np.testing.assert_allclose(model(tokens).numpy(), before, atol=1e-5)
    model.save(tmp_path / "t.keras")
    reloaded = load_model(tmp_path / "t.keras")
    np.testing.assert_allclose(reloaded(tokens).numpy(), before, atol=1e-5)
