from .configuration_dirichlet_student import DirichletStudentConfig
from .modeling_dirichlet_student import (
    DirichletStudentForImageClassification,
    DirichletStudentPreTrainedModel,
)

#: Short alias (`hf_uq.DirichletStudent`).
DirichletStudent = DirichletStudentForImageClassification

__all__ = [
    "DirichletStudent",
    "DirichletStudentConfig",
    "DirichletStudentForImageClassification",
    "DirichletStudentPreTrainedModel",
]
