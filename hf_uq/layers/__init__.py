"""Reusable `nn.Module`s: BatchEnsemble layers (rank-1 fast weights over one shared weight)."""

from .batch_ensemble import (
    FAST_WEIGHT_INITS,
    FAST_WEIGHT_NAMES,
    BatchEnsembleLinear,
    fast_weight_parameter_names,
    init_fast_weights_,
    tile_members,
)

__all__ = [
    "FAST_WEIGHT_INITS",
    "FAST_WEIGHT_NAMES",
    "BatchEnsembleLinear",
    "fast_weight_parameter_names",
    "init_fast_weights_",
    "tile_members",
]
