"""Configuration of a Dirichlet student: one image classifier whose output is a Dirichlet over class probabilities,
distilled from a deep ensemble (Ensemble Distribution Distillation, Malinin, Mlodozeniec & Gales, ICLR 2020)."""

from __future__ import annotations

import math
from typing import Any

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from ..member_utils import ENSEMBLE_UNCERTAINTY_SCORES, id2label_of, member_config_from_dict

#: How the backbone's outputs z become concentrations (see [`DirichletStudentConfig`]).
CONCENTRATIONS = ("exp", "softplus")


@strict(accept_kwargs=True)
class DirichletStudentConfig(PreTrainedConfig):
    r"""
    Configuration of a [`DirichletStudentForImageClassification`]: an image classifier (the backbone) whose C
    outputs z parameterize a Dirichlet distribution `Dir(alpha)` over the class probabilities.

    One forward pass gives what a deep ensemble needs M passes for: the mean prediction `alpha / alpha_0` and the
    split of its entropy into aleatoric (expected entropy) and epistemic (mutual information) parts.

    Args:
        backbone_config (`PreTrainedConfig` or `dict`, *optional*):
            Configuration of the backbone: any transformers image classifier, timm models through
            `TimmWrapperConfig`; a dict (as found in `config.json`) is rebuilt with its own class's `from_dict`
            (which restores a timm config's labels). Defaults to a `ViTConfig`. The key is transformers' usual
            `backbone_config` (its sub-config machinery resolves it through `consolidate_backbone_kwargs_to_config`,
            which also accepts a classifier config such as `ViTConfig`); the backbone is the *whole* classifier
            with its head, not a headless `AutoBackbone`.
        concentration (`str`, *optional*, defaults to `"exp"`):
            The map from backbone outputs z to concentrations:

            - `"exp"`: `log(alpha) = clamp(z, log_alpha_min, log_alpha_max)`, the parameterization of the paper. The
              mean prediction `alpha / alpha_0` is then exactly `softmax(z)` inside the bounds, so a student started
              from a trained classifier ([`~DirichletStudentForImageClassification.from_backbone`]) predicts what
              the classifier predicted. The clamp is hard: outside the bounds the gradient with respect to that z is
              zero (bounds that are never reached in practice keep it inactive; the defaults allow alpha_0 up to
              C * 22026).
            - `"softplus"`: `alpha = clamp(softplus(z), exp(log_alpha_min), exp(log_alpha_max))`, which grows
              linearly rather than exponentially in z.
        log_alpha_min (`float`, *optional*, defaults to -10.0):
            Lower bound of `log(alpha)` (alpha >= 4.5e-5): keeps `lgamma(alpha)` and `digamma(alpha)` finite.
        log_alpha_max (`float`, *optional*, defaults to 10.0):
            Upper bound of `log(alpha)` (alpha <= 22026): keeps `alpha_0` and `lgamma(alpha_0)` finite.
        target_smoothing (`float`, *optional*, defaults to 1e-4):
            Central smoothing eps of the distillation targets: each teacher member's probabilities become
            `(1 - eps) * p + eps / C` before the Dirichlet NLL, which bounds their log from below (members that
            predict exact zeros would otherwise make the likelihood -inf). Stored with the student so that the
            recipe travels with the checkpoint; [`~hf_uq.trainer.EnsembleDistillationConfig`] uses it unless it
            sets its own. It does not affect inference.
        uncertainty_score (`str`, *optional*, defaults to `"total"`):
            The score reported as `uncertainty`: `"total"` (entropy of the mean prediction: the same score a
            [`DeepEnsembleForImageClassification`] reports by default, so the student is a drop-in replacement for
            its teacher, thresholds included), `"epistemic"` (mutual information: model uncertainty, the score of
            choice for out-of-distribution detection in the paper), `"aleatoric"` (expected entropy), or
            `"msp"` / `"margin"` of the mean prediction. All three entropy terms are returned in any case.
        id2label (`dict[int, str]`, *optional*):
            The label space; taken from the backbone when not given.

    Example:

    ```python
    >>> from transformers import ViTConfig
    >>> from hf_uq import DirichletStudentConfig, DirichletStudentForImageClassification
    >>> config = DirichletStudentConfig(
    ...     backbone_config=ViTConfig(hidden_size=64, id2label={0: "cat", 1: "dog"}), uncertainty_score="epistemic"
    ... )
    >>> model = DirichletStudentForImageClassification(config)
    ```
    """

    model_type = "dirichlet_student"
    sub_configs_defaults = {"backbone_config": SubConfigSpec(config_class=AutoConfig, model_type="vit")}

    backbone_config: PreTrainedConfig | dict | None = None
    concentration: str = "exp"
    log_alpha_min: float | int = -10.0
    log_alpha_max: float | int = 10.0
    target_smoothing: float | int = 1e-4
    uncertainty_score: str = "total"

    def __post_init__(self, **kwargs: Any) -> None:
        # from_dict of the backbone's own class (TimmWrapperConfig keeps labels as `label_names`)
        if isinstance(self.backbone_config, dict):
            self.backbone_config = member_config_from_dict(self.backbone_config, "backbone_config")
        super().__post_init__(**kwargs)
        if self.concentration not in CONCENTRATIONS:
            raise ValueError(f"`concentration` must be one of {CONCENTRATIONS}, got {self.concentration!r}")
        self.log_alpha_min = float(self.log_alpha_min)
        self.log_alpha_max = float(self.log_alpha_max)
        if not (math.isfinite(self.log_alpha_min) and math.isfinite(self.log_alpha_max)):
            raise ValueError("`log_alpha_min` and `log_alpha_max` must be finite")
        if not self.log_alpha_min < self.log_alpha_max:
            raise ValueError(
                f"`log_alpha_min` ({self.log_alpha_min}) must be smaller than `log_alpha_max` ({self.log_alpha_max})"
            )
        if self.log_alpha_max > 30.0:
            raise ValueError(f"`log_alpha_max` must be <= 30 (alpha <= 1e13), got {self.log_alpha_max}")
        self.target_smoothing = float(self.target_smoothing)
        if not 0.0 <= self.target_smoothing < 1.0:
            raise ValueError(f"`target_smoothing` must be in [0, 1), got {self.target_smoothing}")
        if self.uncertainty_score not in ENSEMBLE_UNCERTAINTY_SCORES:
            raise ValueError(
                f"`uncertainty_score` must be one of {ENSEMBLE_UNCERTAINTY_SCORES}, got {self.uncertainty_score!r}"
            )
        labels = id2label_of(self.backbone_config)
        if not self._has_own_labels(labels):
            self.id2label = dict(labels)
            self.label2id = {v: k for k, v in labels.items()}
        # nested configs may lose their labels on save (TimmWrapperConfig): copy them back down
        if id2label_of(self.backbone_config) != id2label_of(self):
            self.backbone_config.id2label = dict(self.id2label)
            self.backbone_config.label2id = {v: k for k, v in self.id2label.items()}

    def _has_own_labels(self, labels: dict[int, str]) -> bool:
        """True when id2label was given (not transformers' LABEL_i placeholders) and fits the backbone."""
        if self.id2label is None or len(self.id2label) != len(labels):
            return False
        return any(str(v) != f"LABEL_{k}" for k, v in self.id2label.items())


__all__ = ["CONCENTRATIONS", "DirichletStudentConfig"]
