"""Trainers of hf_uq: `<x>_config.py` (a `TrainingArguments` dataclass) + `<x>_trainer.py` pairs."""

from .ensemble_distillation_config import (
    DISTILLATION_LOSSES,
    TEMPERATURE_SCHEDULES,
    EnsembleDistillationConfig,
)
from .ensemble_distillation_trainer import EnsembleDistillationTrainer, distillation_metrics

__all__ = [
    "DISTILLATION_LOSSES",
    "TEMPERATURE_SCHEDULES",
    "EnsembleDistillationConfig",
    "EnsembleDistillationTrainer",
    "distillation_metrics",
]
