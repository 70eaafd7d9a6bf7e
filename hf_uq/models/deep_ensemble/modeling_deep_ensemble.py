"""Deep ensembles (Lakshminarayanan et al., NeurIPS 2017) of Hugging Face image classifiers as one
`PreTrainedModel`.

M independently trained classifiers sharing a label space are averaged in probability space. The
ensemble is the teacher every cheaper route (duo, BatchEnsemble, distillation, MC dropout) is measured
against: its predictive entropy splits into aleatoric (mean member entropy) and epistemic (mutual
information) parts, computed by [`hf_uq.functional.ensemble_uncertainty`].
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForImageClassification, PreTrainedModel

from ...modeling_outputs import UncertaintyClassifierOutput
from ..member_utils import (
    check_pixel_values,
    ensemble_output,
    id2label_of,
    label_order,
    load_member,
)
from ..modeling_base import HfUqPreTrainedModel
from .configuration_deep_ensemble import DeepEnsembleConfig


class DeepEnsemblePreTrainedModel(HfUqPreTrainedModel):
    config_class = DeepEnsembleConfig
    base_model_prefix = "deep_ensemble"


class DeepEnsembleForImageClassification(DeepEnsemblePreTrainedModel):
    """
    A deep ensemble: M image classifiers sharing one label space, averaged in probability space.

    Build one from trained classifiers with [`~DeepEnsembleForImageClassification.from_members`], then save,
    push and load it like any transformers model (after `import hf_uq`). Members may mix architectures
    (e.g. ViTs and timm CNNs) as long as they take the same `pixel_values`.

    The output's `logits` are the log of the mean member probabilities (so `logits.softmax(-1)` is the
    ensemble's prediction and `loss` is its NLL), `member_logits` are the raw member logits in the ensemble's
    label order, and `total_uncertainty` / `aleatoric_uncertainty` / `epistemic_uncertainty` decompose the
    predictive entropy. `uncertainty` is the score chosen by `config.uncertainty_score` (default: total
    predictive entropy).

    Args:
        config ([`DeepEnsembleConfig`]): holds the member configs, their label orders and the uncertainty score.
    """

    def __init__(self, config: DeepEnsembleConfig):
        super().__init__(config)
        self.members = nn.ModuleList(
            AutoModelForImageClassification.from_config(member) for member in config.member_configs
        )
        self.post_init()

    @classmethod
    def from_members(
        cls,
        members: Sequence[PreTrainedModel | str | os.PathLike],
        *,
        uncertainty_score: str = "total",
        align_labels: bool = False,
        **from_pretrained_kwargs: Any,
    ) -> DeepEnsembleForImageClassification:
        """Combine trained classifiers (instances, local folders or Hub ids) into a deep ensemble.

        Args:
            members: the members, at least one; member 0 fixes the ensemble's label order.
            uncertainty_score: see [`DeepEnsembleConfig`].
            align_labels: accept members that list the same label names in another order than member 0 and
                reorder their logits; otherwise such members raise `ValueError`.
            from_pretrained_kwargs: passed to `from_pretrained` when a member is a folder or Hub id.

        Members with a different number of labels or different label names, and the same instance passed
        twice, raise `ValueError`. The
        members' weights are shared with the instances passed in, not copied. The ensemble starts in the
        training mode of member 0 (call `.eval()` for inference).
        """
        if isinstance(members, (str, os.PathLike)) or not isinstance(members, Sequence):
            raise TypeError(
                f"`members` must be a sequence of models, folders or Hub ids, got {type(members).__name__}"
            )
        if not members:
            raise ValueError("`members` is empty: a deep ensemble needs at least one member")
        models = [load_member(m, f"member {i}", **from_pretrained_kwargs) for i, m in enumerate(members)]
        first_index = {}
        for i, model in enumerate(models):
            j = first_index.setdefault(id(model), i)
            if j != i:
                raise ValueError(
                    f"member {i} is the same model instance as member {j}: ensemble members must be distinct "
                    "models (identical members add no diversity, and shared weights cannot be saved)"
                )
        reference = id2label_of(models[0].config)
        orders = [None] + [
            label_order(reference, id2label_of(m.config), ("member 0", f"member {i}"), align_labels)
            for i, m in enumerate(models[1:], start=1)
        ]
        config = DeepEnsembleConfig(
            member_configs=[m.config for m in models],
            uncertainty_score=uncertainty_score,
            member_label_orders=orders,
            id2label=reference,
        )
        with torch.device("meta"):  # the members built from the config are replaced right away
            ensemble = cls(config)
        ensemble.members = nn.ModuleList(models)
        ensemble.train(models[0].training)
        return ensemble

    @property
    def num_members(self) -> int:
        """The number of members M."""
        return len(self.members)

    def member_logits(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Raw logits of every member, stacked to (M, B, C), each in the ensemble's label order."""
        pixel_values = check_pixel_values(pixel_values, "pixel_values")
        logits = []
        for member, order in zip(self.members, self.config.member_label_orders, strict=True):
            z = member(pixel_values=pixel_values).logits
            logits.append(z if order is None else z[:, order])
        return torch.stack(logits)

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> UncertaintyClassifierOutput | tuple:
        r"""
        pixel_values (`torch.Tensor` of shape `(batch_size, num_channels, height, width)`):
            Input of every member.
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Labels for the loss: the NLL of the mean member probabilities.
        """
        if pixel_values is None:
            raise ValueError("`pixel_values` is required")
        output = ensemble_output(self.member_logits(pixel_values), labels, self.config.uncertainty_score)
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()


__all__ = ["DeepEnsembleForImageClassification", "DeepEnsemblePreTrainedModel"]
