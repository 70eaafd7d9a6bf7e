"""Temperature scaling (Guo et al., ICML 2017) persisted with the model.

One classifier's logits are divided by a single temperature fit by minimizing the NLL on held-out data
(`hf_uq.calibration.fit_temperatures` with one member). The prediction (argmax) never changes; only the
confidence does. This is the single-model baseline every route must beat on calibration.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForImageClassification, PreTrainedModel

from ...functional.scores import entropy
from ...functional.temperature import fuse_logits
from ...modeling_outputs import UncertaintyClassifierOutput
from ..member_utils import check_pixel_values, collect_logits, load_member, logits_uncertainty
from ..modeling_base import HfUqPreTrainedModel
from .configuration_temperature_scaled import TemperatureScaledConfig


class TemperatureScaledPreTrainedModel(HfUqPreTrainedModel):
    config_class = TemperatureScaledConfig
    base_model_prefix = "temperature_scaled"


class TemperatureScaledForImageClassification(TemperatureScaledPreTrainedModel):
    """
    An image classifier with a fitted temperature: `logits = z / T`.

    Wrap a trained classifier with [`~TemperatureScaledForImageClassification.from_model`], fit `T` on a
    calibration split with [`~TemperatureScaledForImageClassification.fit_temperature`], then save, push and load
    it like any transformers model (after `import hf_uq`); the temperature lives in `config.temperature`.

    The output's `uncertainty` is `config.uncertainty_score` of the tempered logits (default: msp) and
    `total_uncertainty` their predictive entropy; a single model cannot split it into aleatoric and epistemic
    parts, so those and `member_logits` are `None`.

    Args:
        config ([`TemperatureScaledConfig`]): holds the wrapped classifier's config, the temperature and the
            uncertainty score.
    """

    def __init__(self, config: TemperatureScaledConfig):
        super().__init__(config)
        self.model = AutoModelForImageClassification.from_config(config.model_config)
        self.post_init()

    @classmethod
    def from_model(
        cls,
        model: PreTrainedModel | str | os.PathLike,
        *,
        temperature: float = 1.0,
        uncertainty_score: str = "msp",
        **from_pretrained_kwargs: Any,
    ) -> TemperatureScaledForImageClassification:
        """Wrap a trained classifier (an instance, a local folder or a Hub id).

        Args:
            model: the classifier.
            temperature: the initial temperature; fit it with `fit_temperature`.
            uncertainty_score: see [`TemperatureScaledConfig`].
            from_pretrained_kwargs: passed to `from_pretrained` when `model` is a folder or Hub id.

        The weights are shared with the instance passed in, not copied; the wrapper starts in its training mode.
        """
        classifier = load_member(model, "model", **from_pretrained_kwargs)
        config = TemperatureScaledConfig(
            model_config=classifier.config, temperature=temperature, uncertainty_score=uncertainty_score
        )
        with torch.device("meta"):  # the classifier built from the config is replaced right away
            wrapper = cls(config)
        wrapper.model = classifier
        wrapper.train(classifier.training)
        return wrapper

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> UncertaintyClassifierOutput | tuple:
        r"""
        pixel_values (`torch.Tensor` of shape `(batch_size, num_channels, height, width)`):
            Input of the wrapped classifier.
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Labels for the cross-entropy of the tempered logits.
        """
        if pixel_values is None:
            raise ValueError("`pixel_values` is required")
        raw = self.model(pixel_values=check_pixel_values(pixel_values, "pixel_values")).logits
        logits = fuse_logits([raw], [self.config.temperature])
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits, labels.to(logits.device).view(-1))
        output = UncertaintyClassifierOutput(
            loss=loss,
            logits=logits,
            uncertainty=logits_uncertainty(logits, self.config.uncertainty_score),
            total_uncertainty=entropy(logits.softmax(-1)),
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()

    def collect_logits(
        self, dataloader: Iterable[dict[str, Any]], progress: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The wrapped classifier's raw logits and the labels over a dataloader of `{"pixel_values", "labels"}`
        batches (eval mode, no gradients; a progress bar unless `progress=False`)."""

        def raw_logits(batch: dict[str, Any]) -> tuple[torch.Tensor]:
            return (self.model(pixel_values=check_pixel_values(batch["pixel_values"], "pixel_values")).logits,)

        (logits,), labels = collect_logits(self, dataloader, raw_logits, "temperature scaling: logits", progress)
        return logits, labels

    def fit_temperature(
        self, dataloader: Iterable[dict[str, Any]], progress: bool = True, **fit_kwargs: Any
    ) -> float:
        """Fit `T` by minimizing the NLL of `z / T` over `dataloader` (`hf_uq.calibration.fit_temperatures`).

        Stores it in `config.temperature` and returns it. The classifier's weights never change. Use a
        calibration split strictly separate from the test split. `progress=False` hides the progress bar;
        `fit_kwargs` go to `fit_temperatures` (e.g. `bounds`, `tol`).
        """
        from ...calibration import fit_temperatures

        logits, labels = self.collect_logits(dataloader, progress)
        (temperature,) = fit_temperatures([logits], labels, **fit_kwargs)
        self.config.temperature = float(temperature)
        return self.config.temperature


__all__ = ["TemperatureScaledForImageClassification", "TemperatureScaledPreTrainedModel"]
