"""The model zoo: resolve a name to a seeded, randomly initialised classification network.

Names: ``resnet50`` (torchvision), ``timm/vit_tiny_patch16_224`` (timm, optional), ``mypkg.mymod:build`` or a
name registered with :func:`register_model` (custom). See :mod:`clsbench.models.registry` for the rules.
Importing this package imports neither torch, torchvision nor timm.
"""

from clsbench.models.registry import create_model, get_model_spec, list_models, register_model
from clsbench.models.spec import ModelSource, ModelSpec

__all__ = ["ModelSource", "ModelSpec", "create_model", "get_model_spec", "list_models", "register_model"]
