"""Dirichlet students (Ensemble Distribution Distillation, Malinin, Mlodozeniec & Gales, ICLR 2020).

A single image classifier whose outputs parameterize a Dirichlet distribution over the class probabilities. Trained
with [`~hf_uq.trainer.EnsembleDistillationTrainer`] to maximize the likelihood of a deep ensemble's member
predictions, it reproduces in one forward pass the ensemble's mean prediction and the split of its uncertainty into
aleatoric and epistemic parts ([`hf_uq.functional.dirichlet_uncertainty`]).
"""

from __future__ import annotations

import copy
import math
import os
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForImageClassification, PreTrainedModel

from ...functional.decomposition import dirichlet_uncertainty
from ...functional.scores import SCORES
from ...modeling_outputs import UncertaintyClassifierOutput
from ..member_utils import check_pixel_values, load_member
from ..modeling_base import HfUqPreTrainedModel
from .configuration_dirichlet_student import DirichletStudentConfig


class DirichletStudentPreTrainedModel(HfUqPreTrainedModel):
    config_class = DirichletStudentConfig
    base_model_prefix = "dirichlet_student"
    # forward's loss is a per-batch mean: Trainer must scale it for gradient accumulation itself
    accepts_loss_kwargs = False


class DirichletStudentForImageClassification(DirichletStudentPreTrainedModel):
    """
    An image classifier that predicts a Dirichlet distribution over class probabilities: the single-model student of
    Ensemble Distribution Distillation.

    The backbone (any transformers or timm image classifier) maps an image to C numbers z; the concentrations are
    `alpha = exp(clamp(z))` (or a softplus, see [`DirichletStudentConfig`]). The output carries:

    - `alphas`: the (B, C) concentrations;
    - `logits`: `log(alpha / alpha_0)`, the log of the Dirichlet's mean, i.e. the predictive distribution
      (`logits.softmax(-1)` gives it back); `loss` (when `labels` are given) is its NLL;
    - `total_uncertainty` / `aleatoric_uncertainty` / `epistemic_uncertainty`: the entropy of the mean prediction,
      the expected entropy and their difference, the mutual information
      ([`hf_uq.functional.dirichlet_uncertainty`]);
    - `uncertainty`: the score chosen by `config.uncertainty_score` (default: total).

    Start from a trained classifier with [`~DirichletStudentForImageClassification.from_backbone`] and distill a deep
    ensemble into it with [`~hf_uq.trainer.EnsembleDistillationTrainer`]. Inference costs one backbone forward plus a
    few (B, C) element-wise operations.

    Args:
        config ([`DirichletStudentConfig`]): holds the backbone's config, the concentration map and the uncertainty
            score.
    """

    def __init__(self, config: DirichletStudentConfig):
        super().__init__(config)
        self.backbone = AutoModelForImageClassification.from_config(config.backbone_config)
        self.post_init()

    @classmethod
    def from_backbone(
        cls,
        backbone: PreTrainedModel | str | os.PathLike,
        *,
        concentration: str = "exp",
        uncertainty_score: str = "total",
        target_smoothing: float = 1e-4,
        log_alpha_min: float = -10.0,
        log_alpha_max: float = 10.0,
        **from_pretrained_kwargs: Any,
    ) -> DirichletStudentForImageClassification:
        """A student whose backbone starts as a copy of a (pretrained) image classifier.

        Args:
            backbone: an image classifier instance, a local folder or a Hub id (any transformers image classifier,
                timm models through `TimmWrapperForImageClassification`). Its weights are *copied*: training the
                student never changes the model passed in (which may well be a member of the teacher ensemble).
            concentration, uncertainty_score, target_smoothing, log_alpha_min, log_alpha_max:
                See [`DirichletStudentConfig`].
            from_pretrained_kwargs: passed to `from_pretrained` when `backbone` is a folder or Hub id.

        With the default `"exp"` concentrations the student's mean prediction starts equal to the classifier's
        softmax (as long as its logits lie within the clamp bounds); training then learns the concentration
        `alpha_0` that expresses the ensemble's diversity. The student starts in the backbone's training mode.
        """
        model = load_member(backbone, "backbone", **from_pretrained_kwargs)
        config = DirichletStudentConfig(
            backbone_config=copy.deepcopy(model.config),
            concentration=concentration,
            uncertainty_score=uncertainty_score,
            target_smoothing=target_smoothing,
            log_alpha_min=log_alpha_min,
            log_alpha_max=log_alpha_max,
        )
        with torch.device("meta"):  # the backbone built from the config is replaced right away
            student = cls(config)
        student.backbone = copy.deepcopy(model)
        student.backbone.config = student.config.backbone_config  # one config object, saved with the student
        student.train(model.training)
        return student

    def log_concentrations(self, backbone_logits: torch.Tensor) -> torch.Tensor:
        """`log(alpha)` from the backbone's (B, C) outputs, following `config.concentration` and its bounds."""
        low, high = self.config.log_alpha_min, self.config.log_alpha_max
        if self.config.concentration == "exp":
            return backbone_logits.clamp(low, high)
        return nn.functional.softplus(backbone_logits).clamp(min=math.exp(low), max=math.exp(high)).log()

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> UncertaintyClassifierOutput | tuple:
        r"""
        pixel_values (`torch.Tensor` of shape `(batch_size, num_channels, height, width)`):
            Input of the backbone.
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Labels for the loss: the NLL of the mean prediction `alpha / alpha_0` (-100 is ignored). Distillation
            uses [`~hf_uq.trainer.EnsembleDistillationTrainer`]'s losses instead.
        output_hidden_states (`bool`, *optional*):
            Passed to the backbone; its hidden states are returned.
        """
        if pixel_values is None:
            raise ValueError("`pixel_values` is required")
        backbone_kwargs = {} if output_hidden_states is None else {"output_hidden_states": output_hidden_states}
        backbone_out = self.backbone(pixel_values=check_pixel_values(pixel_values, "pixel_values"), **backbone_kwargs)
        log_alphas = self.log_concentrations(backbone_out.logits)
        alphas = log_alphas.exp()
        logits = log_alphas.log_softmax(-1)  # log(alpha / alpha_0)
        terms = dirichlet_uncertainty(alphas, validate=False)  # alphas are clamped into bounds above
        score = self.config.uncertainty_score
        uncertainty = terms[score] if score in terms else SCORES[score](logits.exp())
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits, labels.to(logits.device).view(-1))
        output = UncertaintyClassifierOutput(
            loss=loss,
            logits=logits,
            uncertainty=uncertainty,
            total_uncertainty=terms["total"],
            aleatoric_uncertainty=terms["aleatoric"],
            epistemic_uncertainty=terms["epistemic"],
            alphas=alphas,
            hidden_states=getattr(backbone_out, "hidden_states", None),
            attentions=getattr(backbone_out, "attentions", None),
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()


__all__ = ["DirichletStudentForImageClassification", "DirichletStudentPreTrainedModel"]
