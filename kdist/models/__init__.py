"""Model factory and the built-in models (`_target_` in `conf/model/*.yaml`)."""

from kdist.models.cnn import cnn
from kdist.models.factory import build, from_config
from kdist.models.mlp import mlp
from kdist.models.resnet import resnet
from kdist.models.transformer import transformer
from kdist.models.wide_deep import wide_deep

__all__ = ["build", "cnn", "from_config", "mlp", "resnet", "transformer", "wide_deep"]
