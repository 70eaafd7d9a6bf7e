"""Configuration of the Asymmetric Duo (Zhou, Shelhamer and Pleiss, NeurIPS 2025, arXiv 2505.18636)."""

from __future__ import annotations

from typing import Any

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from ..member_utils import id2label_of, member_config_from_dict

DUO_UNCERTAINTY_SCORES = ("duo", "msp", "entropy", "margin", "max_logit", "energy")


@strict(accept_kwargs=True)
class DuoConfig(PreTrainedConfig):
    r"""
    Configuration of a [`DuoForImageClassification`]: a large image classifier and a small "sidekick"
    whose logits are fused as `z = z_large / T_large + z_small / T_small`.

    Args:
        large_config (`PreTrainedConfig` or `dict`, *optional*):
            Configuration of the large member: any transformers image classifier, timm models through
            `TimmWrapperConfig`. Defaults to a `ViTConfig`.
        small_config (`PreTrainedConfig` or `dict`, *optional*):
            Configuration of the small member (the sidekick). Defaults to a `ViTConfig`.
        temperatures (`list[float]`, *optional*, defaults to `[1.0, 1.0]`):
            `[T_large, T_small]`, positive. Fit them with [`DuoForImageClassification.fit_temperatures`].
        uncertainty_score (`str`, *optional*, defaults to `"duo"`):
            The score reported as `uncertainty`: `"duo"` is the paper's `1 - softmax(z)[argmax z_large]`
            (the duo's probability for the large member's class); `"msp"`, `"entropy"`, `"margin"`,
            `"max_logit"` and `"energy"` are computed on the fused logits.
        small_label_order (`list[int]`, *optional*):
            Set when the members list the same labels in different orders: the small member's logits are
            indexed with it so they follow the large member's (and the duo's) `id2label`.
        id2label (`dict[int, str]`, *optional*):
            The shared label space; taken from the large member when not given.

    Example:

    ```python
    >>> from transformers import ViTConfig
    >>> from hf_uq import DuoConfig, DuoForImageClassification
    >>> labels = {0: "cat", 1: "dog"}
    >>> config = DuoConfig(
    ...     large_config=ViTConfig(hidden_size=64, id2label=labels),
    ...     small_config=ViTConfig(hidden_size=32, id2label=labels),
    ... )
    >>> model = DuoForImageClassification(config)
    ```
    """

    model_type = "duo"
    sub_configs_defaults = {
        "large_config": SubConfigSpec(config_class=AutoConfig, model_type="vit"),
        "small_config": SubConfigSpec(config_class=AutoConfig, model_type="vit"),
    }

    large_config: PreTrainedConfig | dict | None = None
    small_config: PreTrainedConfig | dict | None = None
    temperatures: list[float] | None = None
    uncertainty_score: str = "duo"
    small_label_order: list[int] | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        # from_dict of each member's own class (TimmWrapperConfig keeps labels as `label_names`)
        if isinstance(self.large_config, dict):
            self.large_config = member_config_from_dict(self.large_config, "large_config")
        if isinstance(self.small_config, dict):
            self.small_config = member_config_from_dict(self.small_config, "small_config")
        super().__post_init__(**kwargs)
        if self.temperatures is None:
            self.temperatures = [1.0, 1.0]
        self.temperatures = [float(t) for t in self.temperatures]
        if len(self.temperatures) != 2 or min(self.temperatures) <= 0:
            raise ValueError(f"`temperatures` must be two positive numbers, got {self.temperatures}")
        if self.uncertainty_score not in DUO_UNCERTAINTY_SCORES:
            raise ValueError(
                f"`uncertainty_score` must be one of {DUO_UNCERTAINTY_SCORES}, got {self.uncertainty_score!r}"
            )
        large_labels = id2label_of(self.large_config)
        if not self._has_own_labels(large_labels):
            self.id2label = dict(large_labels)
            self.label2id = {v: k for k, v in large_labels.items()}
        # nested configs may lose their labels on save (TimmWrapperConfig): copy them back down
        for sub in (self.large_config, self.small_config):
            if sub.num_labels != self.num_labels:
                sub.num_labels = self.num_labels
        if id2label_of(self.large_config) != id2label_of(self):
            self.large_config.id2label = dict(self.id2label)
            self.large_config.label2id = {v: k for k, v in self.id2label.items()}
        if self.small_label_order is None and id2label_of(self.small_config) != id2label_of(self):
            self.small_config.id2label = dict(self.id2label)
            self.small_config.label2id = {v: k for k, v in self.id2label.items()}

    def _has_own_labels(self, large_labels: dict[int, str]) -> bool:
        """True when id2label was given (not transformers' LABEL_i placeholders) and fits the members."""
        if self.id2label is None or len(self.id2label) != len(large_labels):
            return False
        return any(str(v) != f"LABEL_{k}" for k, v in self.id2label.items())


__all__ = ["DuoConfig"]
