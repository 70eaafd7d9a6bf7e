"""Configuration of a BatchEnsemble Vision Transformer (Wen, Tran and Ba, ICLR 2020)."""

from __future__ import annotations

from typing import Any

from huggingface_hub.dataclasses import strict
from transformers import ViTConfig

from ...layers.batch_ensemble import FAST_WEIGHT_INITS
from ..member_utils import ENSEMBLE_UNCERTAINTY_SCORES

#: Parts of a ViT that can be ensembled: `"attention"` (the query / key / value / output projections of the
#: ensembled blocks), `"mlp"` (both MLP projections of the ensembled blocks) and `"classifier"` (the head).
ENSEMBLE_SUBLAYERS = ("attention", "mlp", "classifier")


@strict(accept_kwargs=True)
class BatchEnsembleViTConfig(ViTConfig):
    r"""
    Configuration of a [`BatchEnsembleViTForImageClassification`]: a ViT whose chosen blocks (and optionally
    head) are BatchEnsembles of `ensemble_size` members, each member a rank-1 modulation `W * (s_i r_i^T)` of one
    shared weight.

    Every [`~transformers.ViTConfig`] field keeps its meaning (this class subclasses it). The batch is tiled
    (repeated once per member) right before the first ensembled block, so blocks before it run once for all
    members: ensembling only the last `k` of `L` blocks is a latent-space ensemble costing about
    `1 + (M - 1) * k / L` single-ViT forwards.

    Args:
        ensemble_size (`int`, *optional*, defaults to 4):
            Number of members M, at least 1.
        ensemble_layers (`list[int]`, *optional*):
            Indices of the ensembled transformer blocks, in `[-num_hidden_layers, num_hidden_layers)` (negative
            indices count from the end: `[-2, -1]` are the last two blocks). Stored sorted, deduplicated and
            non-negative. Defaults to every block. May be empty when only the classifier is ensembled.
        ensemble_sublayers (`list[str]`, *optional*):
            Which linear layers become BatchEnsemble layers, a non-empty subset of `("attention", "mlp",
            "classifier")`: `"attention"` the query / key / value / output projections and `"mlp"` the two MLP
            projections of each ensembled block, `"classifier"` the head. Stored in that canonical order.
            Defaults to all three.
        fast_weight_init (`str`, *optional*, defaults to `"random_sign"`):
            Initialization of the fast weights of newly built members: `"random_sign"` (+1 or -1 with probability
            1/2, the paper's choice), `"normal"` (N(1, `fast_weight_init_std`^2)) or `"ones"` (members identical
            to the shared weights).
        fast_weight_init_std (`float`, *optional*, defaults to 0.5):
            Standard deviation of the `"normal"` initialization.
        uncertainty_score (`str`, *optional*, defaults to `"total"`):
            The score reported as `uncertainty`: `"total"` (predictive entropy of the mean probabilities),
            `"aleatoric"`, `"epistemic"` (mutual information), or `"msp"` / `"margin"` of the mean probabilities.
        kwargs:
            Any [`~transformers.ViTConfig`] / [`~transformers.PreTrainedConfig`] field (`hidden_size`,
            `num_hidden_layers`, `image_size`, `id2label`, ...).

    Raises:
        `ValueError`: `ensemble_size` below 1, a block index out of range, an unknown sublayer or fast-weight
        initialization, or nothing to ensemble (no sublayer, or no block and no classifier).

    Example:

    ```python
    >>> from hf_uq import BatchEnsembleViTConfig, BatchEnsembleViTForImageClassification
    >>> config = BatchEnsembleViTConfig(
    ...     hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128, image_size=16,
    ...     patch_size=4, ensemble_size=4, ensemble_layers=[-2, -1],  # a latent ensemble over the last 2 blocks
    ... )
    >>> model = BatchEnsembleViTForImageClassification(config)
    ```
    """

    model_type = "batch_ensemble_vit"

    ensemble_size: int = 4
    ensemble_layers: list[int] | None = None
    ensemble_sublayers: list[str] | None = None
    fast_weight_init: str = "random_sign"
    fast_weight_init_std: float | int = 0.5
    uncertainty_score: str = "total"

    def __post_init__(self, **kwargs: Any) -> None:
        super().__post_init__(**kwargs)
        if self.ensemble_size < 1:
            raise ValueError(f"`ensemble_size` must be at least 1, got {self.ensemble_size}")
        num_layers = self.num_hidden_layers
        layers = list(range(num_layers)) if self.ensemble_layers is None else list(self.ensemble_layers)
        for index in layers:
            if not -num_layers <= index < num_layers:
                raise ValueError(
                    f"`ensemble_layers` holds block index {index}, out of range for {num_layers} blocks "
                    f"(valid: {-num_layers} to {num_layers - 1})"
                )
        self.ensemble_layers = sorted({index % num_layers for index in layers})
        sublayers = list(ENSEMBLE_SUBLAYERS) if self.ensemble_sublayers is None else list(self.ensemble_sublayers)
        for name in sublayers:
            if name not in ENSEMBLE_SUBLAYERS:
                raise ValueError(
                    f"`ensemble_sublayers` holds unknown sublayer {name!r}; choose from {ENSEMBLE_SUBLAYERS}"
                )
        if not sublayers:
            raise ValueError(f"`ensemble_sublayers` is empty; choose from {ENSEMBLE_SUBLAYERS}")
        self.ensemble_sublayers = [name for name in ENSEMBLE_SUBLAYERS if name in sublayers]
        if not self.ensembled_blocks and "classifier" not in self.ensemble_sublayers:
            raise ValueError(
                "nothing is ensembled: `ensemble_layers` is empty (or `ensemble_sublayers` names no block sublayer) "
                "and the classifier is not in `ensemble_sublayers`"
            )
        if self.fast_weight_init not in FAST_WEIGHT_INITS:
            raise ValueError(
                f"`fast_weight_init` must be one of {FAST_WEIGHT_INITS}, got {self.fast_weight_init!r}"
            )
        if self.fast_weight_init_std < 0:
            raise ValueError(f"`fast_weight_init_std` must be non-negative, got {self.fast_weight_init_std}")
        if self.uncertainty_score not in ENSEMBLE_UNCERTAINTY_SCORES:
            raise ValueError(
                f"`uncertainty_score` must be one of {ENSEMBLE_UNCERTAINTY_SCORES}, got {self.uncertainty_score!r}"
            )

    @property
    def ensembled_blocks(self) -> list[int]:
        """Indices of the blocks holding BatchEnsemble layers (empty when only the classifier is ensembled)."""
        if not {"attention", "mlp"} & set(self.ensemble_sublayers):
            return []
        return list(self.ensemble_layers)

    @property
    def tile_index(self) -> int:
        """Index of the block before which the batch is tiled per member (`num_hidden_layers`: after the last
        block, i.e. only the classifier is ensembled)."""
        blocks = self.ensembled_blocks
        return blocks[0] if blocks else self.num_hidden_layers


__all__ = ["ENSEMBLE_SUBLAYERS", "BatchEnsembleViTConfig"]
