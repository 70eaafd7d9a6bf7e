"""Every Auto-class registration of hf_uq, in one place. Imported by `hf_uq/__init__.py`."""

from transformers import AutoConfig, AutoImageProcessor, AutoModel, AutoModelForImageClassification

from .batch_ensemble_vit import BatchEnsembleViTConfig, BatchEnsembleViTForImageClassification
from .deep_ensemble import DeepEnsembleConfig, DeepEnsembleForImageClassification
from .dirichlet_student import DirichletStudentConfig, DirichletStudentForImageClassification
from .duo import DuoConfig, DuoForImageClassification
from .duo.image_processing_duo import DuoImageProcessor
from .temperature_scaled import TemperatureScaledConfig, TemperatureScaledForImageClassification

_MODELS = [
    (DuoConfig, DuoForImageClassification),
    (DeepEnsembleConfig, DeepEnsembleForImageClassification),
    (TemperatureScaledConfig, TemperatureScaledForImageClassification),
    (BatchEnsembleViTConfig, BatchEnsembleViTForImageClassification),
    (DirichletStudentConfig, DirichletStudentForImageClassification),
]

for _config, _model in _MODELS:
    AutoConfig.register(_config.model_type, _config, exist_ok=True)
    AutoModel.register(_config, _model, exist_ok=True)
    AutoModelForImageClassification.register(_config, _model, exist_ok=True)

# one class serves both backends: it delegates to the members' own processors
AutoImageProcessor.register(
    DuoConfig, image_processor_classes={"pil": DuoImageProcessor, "torchvision": DuoImageProcessor}, exist_ok=True
)
