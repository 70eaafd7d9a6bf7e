"""Configuration of a deep ensemble (Lakshminarayanan et al., NeurIPS 2017): the teacher every route is
measured against."""

from __future__ import annotations

from typing import Any

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig, ViTConfig

from ..member_utils import ENSEMBLE_UNCERTAINTY_SCORES, id2label_of, member_config_from_dict


@strict(accept_kwargs=True)
class DeepEnsembleConfig(PreTrainedConfig):
    r"""
    Configuration of a [`DeepEnsembleForImageClassification`]: M image classifiers sharing one label space whose
    predictions are averaged in probability space.

    The members' configs are stored as a list (`SubConfigSpec` describes single sub-configs only), each
    serialized with its own class's `to_dict` and rebuilt with its own class's `from_dict`, so timm members
    (`TimmWrapperConfig`, which keeps its labels as `label_names`) round-trip too.

    Args:
        member_configs (`list[PreTrainedConfig | dict]`, *optional*):
            Configurations of the members, in order: any transformers image classifier, timm models through
            `TimmWrapperConfig`; dicts (as found in `config.json`) are rebuilt by their `model_type`. Member 0
            is the reference for the label order. Defaults to two default `ViTConfig`s.
        uncertainty_score (`str`, *optional*, defaults to `"total"`):
            The score reported as `uncertainty`: `"total"` (the predictive entropy of the mean probabilities,
            the usual deep-ensemble score), `"aleatoric"` (the members' mean entropy), `"epistemic"` (the mutual
            information, total minus aleatoric), or `"msp"` / `"margin"` of the mean probabilities. All three
            entropy terms are returned in any case.
        member_label_orders (`list[list[int] | None]`, *optional*):
            One entry per member: `None` when the member lists its labels in the ensemble's order, else the
            index list that reorders its logits into that order (set by `from_members(..., align_labels=True)`).
            Defaults to `None` for every member.
        id2label (`dict[int, str]`, *optional*):
            The shared label space; taken from member 0 when not given.

    Example:

    ```python
    >>> from transformers import ViTConfig
    >>> from hf_uq import DeepEnsembleConfig, DeepEnsembleForImageClassification
    >>> labels = {0: "cat", 1: "dog"}
    >>> config = DeepEnsembleConfig(
    ...     member_configs=[ViTConfig(hidden_size=64, id2label=labels) for _ in range(5)],
    ... )
    >>> model = DeepEnsembleForImageClassification(config)
    ```
    """

    model_type = "deep_ensemble"

    member_configs: list[PreTrainedConfig | dict] | None = None
    uncertainty_score: str = "total"
    member_label_orders: list[list[int] | None] | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        if self.member_configs is None:
            self.member_configs = [ViTConfig(), ViTConfig()]
        self.member_configs = [
            member_config_from_dict(member, f"member_configs[{i}]") for i, member in enumerate(self.member_configs)
        ]
        if not self.member_configs:
            raise ValueError("`member_configs` is empty: a deep ensemble needs at least one member")
        super().__post_init__(**kwargs)
        if self.uncertainty_score not in ENSEMBLE_UNCERTAINTY_SCORES:
            raise ValueError(
                f"`uncertainty_score` must be one of {ENSEMBLE_UNCERTAINTY_SCORES}, got {self.uncertainty_score!r}"
            )
        num_members = len(self.member_configs)
        if self.member_label_orders is None:
            self.member_label_orders = [None] * num_members
        if len(self.member_label_orders) != num_members:
            raise ValueError(
                f"`member_label_orders` has {len(self.member_label_orders)} entries for {num_members} members"
            )
        reference = id2label_of(self.member_configs[0])
        if not self._has_own_labels(reference):
            self.id2label = dict(reference)
            self.label2id = {v: k for k, v in reference.items()}
        for i, (member, order) in enumerate(zip(self.member_configs, self.member_label_orders, strict=True)):
            labels = id2label_of(member)
            if len(labels) != self.num_labels and (order is not None or not _placeholders(labels)):
                raise ValueError(
                    f"member {i} has {len(labels)} labels but the ensemble has {self.num_labels}: "
                    "members must share one label space"
                )
            if order is not None:
                if sorted(order) != list(range(self.num_labels)):
                    raise ValueError(
                        f"`member_label_orders[{i}]` must be a permutation of range({self.num_labels}), "
                        f"got {order}"
                    )
            elif labels != id2label_of(self):
                # nested configs may lose their labels on save (TimmWrapperConfig): copy them back down
                member.id2label = dict(self.id2label)
                member.label2id = {v: k for k, v in self.id2label.items()}

    def _has_own_labels(self, reference: dict[int, str]) -> bool:
        """True when id2label was given (not transformers' LABEL_i placeholders) and fits the members."""
        if self.id2label is None or _placeholders(id2label_of(self)):
            return False
        return len(self.id2label) == len(reference) or _placeholders(reference)

    @property
    def _attn_implementation(self) -> str | None:
        return self._attn_implementation_internal

    @_attn_implementation.setter
    def _attn_implementation(self, value: str | dict | None) -> None:
        # transformers only recurses into `sub_configs`; pass the choice on to the listed members too
        PreTrainedConfig._attn_implementation.fset(self, value)
        if isinstance(value, dict):
            if "member_configs" not in value:
                return
            value = value["member_configs"]
        if value is None:  # unset: keep each member's own choice
            return
        for member in self.member_configs or ():
            if isinstance(member, PreTrainedConfig):
                member._attn_implementation = value

    @property
    def num_members(self) -> int:
        """The number of members M."""
        return len(self.member_configs)

    def to_dict(self) -> dict[str, Any]:
        """Serializes the config; each member with its own class's `to_dict` (see the class docstring)."""
        output = super().to_dict()
        output["member_configs"] = self._member_dicts(diff=False)
        return output

    def to_diff_dict(self) -> dict[str, Any]:
        """As `to_dict`, keeping only non-default values, each member diffed against its own defaults."""
        output = super().to_diff_dict()
        output["member_configs"] = self._member_dicts(diff=True)
        return output

    def _member_dicts(self, diff: bool) -> list[dict[str, Any]]:
        members = []
        for member in self.member_configs:
            member_dict = member.to_diff_dict() if diff else member.to_dict()
            member_dict.pop("transformers_version", None)
            member_dict["model_type"] = member.model_type
            members.append(member_dict)
        return members


def _placeholders(id2label: dict[int, str]) -> bool:
    """True for transformers' default `LABEL_i` names (a config built without labels)."""
    return all(str(v) == f"LABEL_{k}" for k, v in id2label.items())


__all__ = ["DeepEnsembleConfig"]
