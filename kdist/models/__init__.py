"""Model factory and the built-in models (`_target_` in `conf/model/*.yaml`)."""

from kdist.models.factory import build, from_config
from kdist.models.mnist_cnn import cnn
from kdist.models.perceptron import mlp
from kdist.models.resnet import resnet
from kdist.models.transformer import transformer

__all__ = ["build", "cnn", "from_config", "mlp", "resnet", "transformer"]
