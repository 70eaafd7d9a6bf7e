from .configuration_temperature_scaled import TemperatureScaledConfig
from .modeling_temperature_scaled import (
    TemperatureScaledForImageClassification,
    TemperatureScaledPreTrainedModel,
)

__all__ = [
    "TemperatureScaledConfig",
    "TemperatureScaledForImageClassification",
    "TemperatureScaledPreTrainedModel",
]
