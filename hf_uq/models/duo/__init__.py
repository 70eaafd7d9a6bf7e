from .configuration_duo import DuoConfig
from .image_processing_duo import DuoImageProcessor
from .modeling_duo import DuoForImageClassification, DuoPreTrainedModel

__all__ = ["DuoConfig", "DuoImageProcessor", "DuoForImageClassification", "DuoPreTrainedModel"]
