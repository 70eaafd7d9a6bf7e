"""Configuration of a temperature-scaled image classifier (Guo et al., ICML 2017)."""

from __future__ import annotations

import math
from typing import Any

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from ..member_utils import SINGLE_MODEL_UNCERTAINTY_SCORES, id2label_of, member_config_from_dict


@strict(accept_kwargs=True)
class TemperatureScaledConfig(PreTrainedConfig):
    r"""
    Configuration of a [`TemperatureScaledForImageClassification`]: one image classifier whose logits are
    divided by a single temperature `T` fit on held-out data, the classic post-hoc calibration baseline.

    Args:
        model_config (`PreTrainedConfig` or `dict`, *optional*):
            Configuration of the wrapped classifier: any transformers image classifier, timm models through
            `TimmWrapperConfig`. Defaults to a `ViTConfig`.
        temperature (`float`, *optional*, defaults to 1.0):
            The temperature `T > 0`; the model's `logits` are `z / T`. Fit it with
            [`TemperatureScaledForImageClassification.fit_temperature`].
        uncertainty_score (`str`, *optional*, defaults to `"msp"`):
            The score reported as `uncertainty`, computed on the tempered logits: `"msp"` (1 - max probability),
            `"entropy"`, `"margin"`, `"max_logit"` or `"energy"`.
        id2label (`dict[int, str]`, *optional*):
            The label space; taken from the wrapped classifier when not given.

    Example:

    ```python
    >>> from transformers import ViTConfig
    >>> from hf_uq import TemperatureScaledConfig, TemperatureScaledForImageClassification
    >>> config = TemperatureScaledConfig(
    ...     model_config=ViTConfig(hidden_size=64, id2label={0: "cat", 1: "dog"}), temperature=1.5
    ... )
    >>> model = TemperatureScaledForImageClassification(config)
    ```
    """

    model_type = "temperature_scaled"
    sub_configs_defaults = {"model_config": SubConfigSpec(config_class=AutoConfig, model_type="vit")}

    model_config: PreTrainedConfig | dict | None = None
    temperature: float = 1.0
    uncertainty_score: str = "msp"

    def __post_init__(self, **kwargs: Any) -> None:
        # from_dict of the member's own class (TimmWrapperConfig keeps labels as `label_names`)
        if isinstance(self.model_config, dict):
            self.model_config = member_config_from_dict(self.model_config, "model_config")
        super().__post_init__(**kwargs)
        self.temperature = float(self.temperature)
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"`temperature` must be finite and positive, got {self.temperature}")
        if self.uncertainty_score not in SINGLE_MODEL_UNCERTAINTY_SCORES:
            raise ValueError(
                f"`uncertainty_score` must be one of {SINGLE_MODEL_UNCERTAINTY_SCORES}, got "
                f"{self.uncertainty_score!r}"
            )
        labels = id2label_of(self.model_config)
        if not self._has_own_labels(labels):
            self.id2label = dict(labels)
            self.label2id = {v: k for k, v in labels.items()}
        # nested configs may lose their labels on save (TimmWrapperConfig): copy them back down
        if id2label_of(self.model_config) != id2label_of(self):
            self.model_config.id2label = dict(self.id2label)
            self.model_config.label2id = {v: k for k, v in self.id2label.items()}

    def _has_own_labels(self, labels: dict[int, str]) -> bool:
        """True when id2label was given (not transformers' LABEL_i placeholders) and fits the member."""
        if self.id2label is None or len(self.id2label) != len(labels):
            return False
        return any(str(v) != f"LABEL_{k}" for k, v in self.id2label.items())


__all__ = ["TemperatureScaledConfig"]
