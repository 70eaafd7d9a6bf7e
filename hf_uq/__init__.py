"""hf_uq: deep-ensemble-quality uncertainty for Hugging Face image classifiers at single-model cost.

Importing ``hf_uq`` registers every hf_uq model type with the transformers Auto classes, so
``AutoModelForImageClassification.from_pretrained(folder)`` loads hf_uq models.
"""

from . import functional
from ._metrics import available_metrics, load_metric
from .calibration import fit_temperatures
from .data import (
    DIGITS_ID2LABEL,
    DIGITS_LABELS,
    OOD_SPLITS,
    SHIFT_SPLITS,
    load_digits_benchmark,
    load_image_dataset,
    with_pixel_values,
)
from .layers import BatchEnsembleLinear
from .mc_dropout import MCDropoutModel, mc_dropout
from .modeling_outputs import UncertaintyClassifierOutput
from .models import auto as _auto  # noqa: F401  (Auto-class registrations)
from .models.batch_ensemble_vit import (
    BatchEnsembleViTConfig,
    BatchEnsembleViTForImageClassification,
    BatchEnsembleViTModel,
)
from .models.deep_ensemble import DeepEnsembleConfig, DeepEnsembleForImageClassification
from .models.dirichlet_student import (
    DirichletStudent,
    DirichletStudentConfig,
    DirichletStudentForImageClassification,
)
from .models.duo import DuoConfig, DuoForImageClassification, DuoImageProcessor
from .models.temperature_scaled import (
    TemperatureScaledConfig,
    TemperatureScaledForImageClassification,
)
from .models.tiny import tiny_cnn, tiny_image_processor, tiny_vit
from .quantization import QuantizationInfo, load_quantized, quantize
from .trainer import EnsembleDistillationConfig, EnsembleDistillationTrainer
from .training import fit_classifier

BatchEnsembleViT = BatchEnsembleViTForImageClassification

__version__ = "0.1.0"

__all__ = [
    "DirichletStudent",
    "DirichletStudentConfig",
    "DirichletStudentForImageClassification",
    "EnsembleDistillationConfig",
    "EnsembleDistillationTrainer",
    "QuantizationInfo",
    "load_quantized",
    "quantize",
    "BatchEnsembleLinear",
    "BatchEnsembleViT",
    "BatchEnsembleViTConfig",
    "BatchEnsembleViTForImageClassification",
    "BatchEnsembleViTModel",
    "DIGITS_ID2LABEL",
    "DIGITS_LABELS",
    "OOD_SPLITS",
    "SHIFT_SPLITS",
    "fit_classifier",
    "fit_temperatures",
    "load_digits_benchmark",
    "load_image_dataset",
    "tiny_cnn",
    "tiny_image_processor",
    "tiny_vit",
    "with_pixel_values",
    "DeepEnsembleConfig",
    "DeepEnsembleForImageClassification",
    "MCDropoutModel",
    "TemperatureScaledConfig",
    "TemperatureScaledForImageClassification",
    "mc_dropout",
    "DuoConfig",
    "DuoForImageClassification",
    "DuoImageProcessor",
    "UncertaintyClassifierOutput",
    "__version__",
    "available_metrics",
    "functional",
    "load_metric",
]
