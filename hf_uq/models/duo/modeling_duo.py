"""Asymmetric Duos (Zhou, Shelhamer and Pleiss, NeurIPS 2025, arXiv 2505.18636) as a `PreTrainedModel`.

A large image classifier and a small sidekick (5-20% of its FLOPs) are fused at the logit level,
`z = z_large / T_large + z_small / T_small`, with the two temperatures fit by L-BFGS on validation
NLL. The duo's uncertainty is the fused probability of the large member's class.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForImageClassification, PreTrainedModel

from ...functional.scores import energy, entropy, margin, max_logit, msp
from ...functional.temperature import fuse_logits
from ...modeling_outputs import UncertaintyClassifierOutput
from ..member_utils import check_pixel_values, collect_logits, id2label_of, label_order, load_member
from ..modeling_base import HfUqPreTrainedModel
from .configuration_duo import DuoConfig


def score_fused_logits(fused: torch.Tensor, large_logits: torch.Tensor, score: str) -> torch.Tensor:
    """The duo's uncertainty score from the fused logits (higher = less trustworthy)."""
    if score == "duo":
        probs = fused.softmax(-1)
        return 1.0 - probs.gather(-1, large_logits.argmax(-1, keepdim=True)).squeeze(-1)
    if score in ("max_logit", "energy"):
        return {"max_logit": max_logit, "energy": energy}[score](fused)
    return {"msp": msp, "entropy": entropy, "margin": margin}[score](fused.softmax(-1))


class DuoPreTrainedModel(HfUqPreTrainedModel):
    config_class = DuoConfig
    base_model_prefix = "duo"


class DuoForImageClassification(DuoPreTrainedModel):
    """
    An Asymmetric Duo: two image classifiers sharing one label space, fused at the logit level.

    Build one from two trained classifiers with [`~DuoForImageClassification.from_members`], fit the two
    temperatures on held-out data with [`~DuoForImageClassification.fit_temperatures`], then save, push and
    load it like any transformers model (after `import hf_uq`).

    Args:
        config ([`DuoConfig`]): holds both member configs, the temperatures and the uncertainty score.
    """

    def __init__(self, config: DuoConfig):
        super().__init__(config)
        self.large = AutoModelForImageClassification.from_config(config.large_config)
        self.small = AutoModelForImageClassification.from_config(config.small_config)
        self.post_init()

    @classmethod
    def from_members(
        cls,
        large: PreTrainedModel | str | os.PathLike,
        small: PreTrainedModel | str | os.PathLike,
        *,
        temperatures: Iterable[float] = (1.0, 1.0),
        uncertainty_score: str = "duo",
        align_labels: bool = False,
        **from_pretrained_kwargs: Any,
    ) -> DuoForImageClassification:
        """Pair two trained classifiers (instances, local folders or Hub ids) into a duo.

        Args:
            large: the large member.
            small: the small sidekick.
            temperatures: initial `[T_large, T_small]`; fit them with `fit_temperatures`.
            uncertainty_score: see [`DuoConfig`].
            align_labels: accept a sidekick that lists the same label names in another order and reorder
                its logits; otherwise such members raise `ValueError`.
            from_pretrained_kwargs: passed to `from_pretrained` when a member is a folder or Hub id.

        The members' weights are shared with the instances passed in, not copied.
        """
        large_model = load_member(large, "large", **from_pretrained_kwargs)
        small_model = load_member(small, "small", **from_pretrained_kwargs)
        order = label_order(
            id2label_of(large_model.config), id2label_of(small_model.config), ("large", "small"), align_labels
        )
        config = DuoConfig(
            large_config=large_model.config,
            small_config=small_model.config,
            temperatures=list(temperatures),
            uncertainty_score=uncertainty_score,
            small_label_order=order,
            id2label=id2label_of(large_model.config),
        )
        duo = cls(config)
        duo.large = large_model
        duo.small = small_model
        duo.train(large_model.training)
        return duo

    def member_logits(
        self, pixel_values: torch.Tensor, pixel_values_small: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw logits of both members, the small one reordered to the duo's label order."""
        pixel_values = check_pixel_values(pixel_values, "pixel_values")
        if pixel_values_small is None:
            pixel_values_small = pixel_values
        else:
            pixel_values_small = check_pixel_values(pixel_values_small, "pixel_values_small")
            if len(pixel_values_small) != len(pixel_values):
                raise ValueError(
                    f"`pixel_values` has batch size {len(pixel_values)} but `pixel_values_small` has "
                    f"{len(pixel_values_small)}"
                )
        large_logits = self.large(pixel_values=pixel_values).logits
        small_logits = self.small(pixel_values=pixel_values_small).logits
        if self.config.small_label_order is not None:
            small_logits = small_logits[:, self.config.small_label_order]
        return large_logits, small_logits

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        pixel_values_small: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> UncertaintyClassifierOutput | tuple:
        r"""
        pixel_values (`torch.Tensor` of shape `(batch_size, num_channels, height, width)`):
            Input of the large member, and of the small one unless `pixel_values_small` is given.
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Labels for the cross-entropy of the fused logits.
        pixel_values_small (`torch.Tensor`, *optional*):
            Input of the small member when its preprocessing differs (see [`DuoImageProcessor`]).
        """
        if pixel_values is None:
            raise ValueError("`pixel_values` is required")
        large_logits, small_logits = self.member_logits(pixel_values, pixel_values_small)
        fused = fuse_logits([large_logits, small_logits], self.config.temperatures)
        uncertainty = score_fused_logits(fused, large_logits, self.config.uncertainty_score)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(fused, labels.to(fused.device).view(-1))
        output = UncertaintyClassifierOutput(
            loss=loss,
            logits=fused,
            uncertainty=uncertainty,
            member_logits=torch.stack([large_logits, small_logits]),
            total_uncertainty=entropy(fused.softmax(-1)),
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()

    def collect_member_logits(
        self, dataloader: Iterable[dict[str, Any]], progress: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run both members over a dataloader of `{"pixel_values", "labels"}` batches (eval mode, with a progress
        bar unless `progress=False`)."""

        def both_members(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
            return self.member_logits(batch["pixel_values"], batch.get("pixel_values_small"))

        (large, small), labels = collect_logits(self, dataloader, both_members, "duo: member logits", progress)
        return large, small, labels

    def fit_temperatures(
        self, dataloader: Iterable[dict[str, Any]], progress: bool = True, **fit_kwargs: Any
    ) -> list[float]:
        """Fit `[T_large, T_small]` by L-BFGS on the NLL of the fused logits over `dataloader`.

        Stores them in `config.temperatures` and returns them. Member weights never change. Use a
        calibration split that is strictly separate from the test split. `progress=False` hides the
        progress bar of the pass over `dataloader`; `fit_kwargs` go to `hf_uq.calibration.fit_temperatures`
        (e.g. `bounds`, `tol`).
        """
        from ...calibration import fit_temperatures

        large, small, labels = self.collect_member_logits(dataloader, progress)
        temperatures = fit_temperatures([large, small], labels, **fit_kwargs)
        self.config.temperatures = [float(t) for t in temperatures]
        return self.config.temperatures


__all__ = ["DuoForImageClassification", "DuoPreTrainedModel"]
