from .configuration_batch_ensemble_vit import ENSEMBLE_SUBLAYERS, BatchEnsembleViTConfig
from .modeling_batch_ensemble_vit import (
    BatchEnsembleViTForImageClassification,
    BatchEnsembleViTModel,
    BatchEnsembleViTPreTrainedModel,
)

__all__ = [
    "ENSEMBLE_SUBLAYERS",
    "BatchEnsembleViTConfig",
    "BatchEnsembleViTForImageClassification",
    "BatchEnsembleViTModel",
    "BatchEnsembleViTPreTrainedModel",
]
