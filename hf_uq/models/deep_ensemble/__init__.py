from .configuration_deep_ensemble import DeepEnsembleConfig
from .modeling_deep_ensemble import DeepEnsembleForImageClassification, DeepEnsemblePreTrainedModel

__all__ = ["DeepEnsembleConfig", "DeepEnsembleForImageClassification", "DeepEnsemblePreTrainedModel"]
