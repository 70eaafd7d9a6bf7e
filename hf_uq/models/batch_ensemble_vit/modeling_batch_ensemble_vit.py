"""BatchEnsemble Vision Transformers (Wen, Tran and Ba, "BatchEnsemble: an Alternative Approach to Efficient
Ensemble and Lifelong Learning", ICLR 2020), reimplemented from the paper on transformers' ViT building blocks.

M members share every weight of one ViT; in the ensembled blocks (and optionally the head) each linear layer is a
[`~hf_uq.layers.BatchEnsembleLinear`]: member `i` uses `W * (s_i r_i^T)` for rank-1 "fast" weights `r_i`, `s_i`
and its own bias. The members run in one batched forward: the batch is tiled (repeated once per member,
member-major: rows `[i * B, (i + 1) * B)` belong to member `i`) right before the first ensembled block, so blocks
before it run once. Ensembling all blocks gives the paper's BatchEnsemble (about one model's parameters, M
forwards' compute in one batched pass); ensembling only the last `k` of `L` blocks gives a latent-space ensemble
costing about `1 + (M - 1) * k / L` single forwards.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, ViTForImageClassification
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutput
from transformers.models.vit.modeling_vit import ViTEmbeddings, ViTLayer

from ...layers.batch_ensemble import BatchEnsembleLinear, init_fast_weights_, tile_members
from ...modeling_outputs import UncertaintyClassifierOutput
from ..member_utils import check_pixel_values, ensemble_output, load_member
from ..modeling_base import HfUqPreTrainedModel
from .configuration_batch_ensemble_vit import BatchEnsembleViTConfig

#: Linear layers of a transformers `ViTLayer` replaced in an ensembled block, per sublayer name.
_BLOCK_LINEARS = {
    "attention": ("attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.o_proj"),
    "mlp": ("mlp.fc1", "mlp.fc2"),
}
#: Linear layers whose input is a temporary read by nothing else in transformers' `ViTLayer.forward` (the layer
#: norms' and activation's outputs, the attention output; `v_proj` is the last of q / k / v to read the normed
#: input): without autograd their BatchEnsemble layers scale the input in place.
_PRIVATE_INPUTS = ("attention.v_proj", "attention.o_proj", "mlp.fc1", "mlp.fc2")
#: `ViTConfig` fields that are not copied into a converted model's config.
_NOT_COPIED = ("model_type", "architectures", "transformers_version", "auto_map", "_name_or_path")


def _batch_ensemble_linear(
    linear: nn.Linear, config: BatchEnsembleViTConfig, scale_input_in_place: bool = False
) -> BatchEnsembleLinear:
    return BatchEnsembleLinear(
        linear.in_features,
        linear.out_features,
        config.ensemble_size,
        bias=linear.bias is not None,
        fast_weight_init=config.fast_weight_init,
        fast_weight_init_std=config.fast_weight_init_std,
        scale_input_in_place=scale_input_in_place,
    )


def _ensemble_block(layer: ViTLayer, config: BatchEnsembleViTConfig) -> None:
    """Swap the chosen linear layers of a transformers `ViTLayer` for BatchEnsemble layers, in place."""
    for sublayer in config.ensemble_sublayers:
        for path in _BLOCK_LINEARS.get(sublayer, ()):
            parent_path, _, name = path.rpartition(".")
            parent = layer.get_submodule(parent_path)
            replacement = _batch_ensemble_linear(getattr(parent, name), config, path in _PRIVATE_INPUTS)
            setattr(parent, name, replacement)


class BatchEnsembleViTPreTrainedModel(HfUqPreTrainedModel):
    config_class = BatchEnsembleViTConfig
    base_model_prefix = "vit"
    supports_gradient_checkpointing = True
    _no_split_modules = ["ViTEmbeddings", "ViTLayer"]
    # the loss is a plain mean (see `BatchEnsembleViTForImageClassification.forward`): let `Trainer` scale it for
    # gradient accumulation instead of passing `num_items_in_batch`
    accepts_loss_kwargs = False

    def _init_weights(self, module: nn.Module) -> None:
        """ViT's initialization (normal(0, `initializer_range`) linear weights, zero biases, truncated-normal
        position embeddings and CLS token); fast weights from `config.fast_weight_init`."""
        std = self.config.initializer_range
        if isinstance(module, BatchEnsembleLinear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
            for fast in (module.fast_in_norm, module.fast_out_norm):
                if not getattr(fast, "_is_hf_initialized", False):
                    init_fast_weights_(fast, self.config.fast_weight_init, self.config.fast_weight_init_std)
        elif isinstance(module, ViTEmbeddings):
            init.trunc_normal_(module.position_embeddings, mean=0.0, std=std)
            init.trunc_normal_(module.cls_token, mean=0.0, std=std)
            if module.mask_token is not None:
                init.zeros_(module.mask_token)
        else:
            PreTrainedModel._init_weights(self, module)


class BatchEnsembleViTModel(BatchEnsembleViTPreTrainedModel):
    """
    The bare BatchEnsemble ViT encoder: transformers' `ViTEmbeddings` and `ViTLayer` blocks (the ensembled ones with
    [`~hf_uq.layers.BatchEnsembleLinear`] projections) and a final LayerNorm, without pooler.

    Its `last_hidden_state` has `ensemble_size * batch_size` rows in the member-major layout (rows
    `[i * B, (i + 1) * B)` are member `i`'s) when any block is ensembled, and `batch_size` rows when only the
    classifier is (`config.tile_index == num_hidden_layers`). With `output_hidden_states=True`, the hidden states
    before `config.tile_index` have `batch_size` rows and the later ones `ensemble_size * batch_size`.

    Args:
        config ([`BatchEnsembleViTConfig`]): the ViT dimensions and which blocks are ensembled.
    """

    def __init__(self, config: BatchEnsembleViTConfig):
        super().__init__(config)
        self.embeddings = ViTEmbeddings(config)
        self.layers = nn.ModuleList([ViTLayer(config) for _ in range(config.num_hidden_layers)])
        for index in config.ensembled_blocks:
            _ensemble_block(self.layers[index], config)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.patch_embeddings

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutput | tuple:
        r"""
        pixel_values (`torch.Tensor` of shape `(batch_size, num_channels, height, width)`):
            The images.
        interpolate_pos_encoding (`bool`, *optional*):
            Interpolate the position embeddings for inputs of another resolution, as in ViT.
        output_hidden_states (`bool`, *optional*):
            Also return the embeddings and every block's output (see the class docstring for their batch sizes).
        """
        pixel_values = check_pixel_values(pixel_values, "pixel_values")
        if kwargs.get("output_attentions"):
            raise ValueError("BatchEnsembleViT does not return attention weights (`output_attentions=True`)")
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        expected_dtype = self.embeddings.patch_embeddings.projection.weight.dtype
        hidden_states = self.embeddings(
            pixel_values.to(expected_dtype), interpolate_pos_encoding=bool(interpolate_pos_encoding)
        )
        all_hidden_states = [hidden_states] if output_hidden_states else None
        tile_index = self.config.tile_index
        for index, layer in enumerate(self.layers):
            if index == tile_index:
                hidden_states = tile_members(hidden_states, self.config.ensemble_size)
            hidden_states = layer(hidden_states, None)
            if all_hidden_states is not None:
                all_hidden_states.append(hidden_states)
        output = BaseModelOutput(
            last_hidden_state=self.layernorm(hidden_states),
            hidden_states=tuple(all_hidden_states) if all_hidden_states is not None else None,
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()


class BatchEnsembleViTForImageClassification(BatchEnsembleViTPreTrainedModel):
    """
    A BatchEnsemble ViT image classifier: M members sharing one ViT's weights, each with its own rank-1 fast weights
    in the ensembled blocks (and head), run in one batched forward.

    Convert a trained `ViTForImageClassification` with [`~BatchEnsembleViTForImageClassification.from_vit`] and
    fine-tune it (the stock `transformers.Trainer` or [`hf_uq.training.fit_classifier`] work as is), or build one
    from a [`BatchEnsembleViTConfig`] and train it from scratch.

    Output ([`UncertaintyClassifierOutput`]): `logits` are the log of the members' mean probabilities,
    `member_logits` the `(M, B, C)` member logits, and `total_uncertainty` / `aleatoric_uncertainty` /
    `epistemic_uncertainty` decompose the predictive entropy; `uncertainty` is `config.uncertainty_score`.

    Training: in training mode (`model.train()`) with `labels`, every member is trained on its own tile of the
    batch (the labels are tiled inside the model) and `loss` is the mean over members of each member's mean
    cross-entropy, the paper's objective: members learn independently through their fast weights and jointly
    through the shared ones. In evaluation mode, `loss` is the NLL of the mean probabilities (what
    `Trainer.evaluate` reports as `eval_loss`). Only single-label classification is supported.

    Weight decay: the stock `Trainer` decays the shared weights but neither the per-member biases (names containing
    `bias`) nor the fast weights, which are named `fast_in_norm` / `fast_out_norm` so that
    `Trainer.get_decay_parameter_names` (pattern `_norm`) excludes them like normalization gains; see
    [`hf_uq.layers.FAST_WEIGHT_NAMES`] and [`hf_uq.layers.fast_weight_parameter_names`] for custom optimizers.

    Args:
        config ([`BatchEnsembleViTConfig`]): the ViT dimensions, the labels and what is ensembled.
    """

    def __init__(self, config: BatchEnsembleViTConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.vit = BatchEnsembleViTModel(config)
        classifier = nn.Linear(config.hidden_size, config.num_labels)
        if "classifier" in config.ensemble_sublayers:
            classifier = _batch_ensemble_linear(classifier, config)
        self.classifier = classifier
        self.post_init()

    @property
    def ensemble_size(self) -> int:
        """The number of members M."""
        return self.config.ensemble_size

    @classmethod
    def from_vit(
        cls,
        vit_or_path: ViTForImageClassification | str | os.PathLike,
        ensemble_size: int = 4,
        ensemble_layers: list[int] | None = None,
        ensemble_sublayers: list[str] | None = None,
        fast_weight_init: str = "random_sign",
        fast_weight_init_std: float = 0.5,
        uncertainty_score: str = "total",
        **from_pretrained_kwargs: Any,
    ) -> BatchEnsembleViTForImageClassification:
        """Convert a `ViTForImageClassification` into a BatchEnsemble: every weight is copied into the shared
        weights, every bias into each member's bias, and the fast weights are drawn from `fast_weight_init`.

        Args:
            vit_or_path (`ViTForImageClassification`, `str` or `os.PathLike`):
                The ViT: an instance (not modified; its weights are copied), a local folder or a Hub id.
            ensemble_size (`int`, *optional*, defaults to 4):
                Number of members M.
            ensemble_layers (`list[int]`, *optional*):
                Blocks to ensemble (negative indices count from the end); defaults to all.
            ensemble_sublayers (`list[str]`, *optional*):
                Subset of `("attention", "mlp", "classifier")`; defaults to all three.
            fast_weight_init (`str`, *optional*, defaults to `"random_sign"`):
                `"random_sign"` (the paper's +-1: members start far apart, fine-tuning is needed), `"normal"`
                (N(1, `fast_weight_init_std`^2): members start as perturbations of the ViT, the gentler choice for
                converting a trained model) or `"ones"` (every member reproduces the ViT; diversity then comes only
                from training noise such as dropout).
            fast_weight_init_std (`float`, *optional*, defaults to 0.5):
                Standard deviation of the `"normal"` initialization.
            uncertainty_score (`str`, *optional*, defaults to `"total"`):
                See [`BatchEnsembleViTConfig`].
            from_pretrained_kwargs:
                Passed to `from_pretrained` when `vit_or_path` is a folder or Hub id.

        Returns:
            [`BatchEnsembleViTForImageClassification`] on the ViT's device and dtype, in its training mode. Draws
            from the global torch RNG (seed it for reproducible fast weights).
        """
        vit = load_member(vit_or_path, "vit", **from_pretrained_kwargs)
        if not isinstance(vit, ViTForImageClassification):
            raise TypeError(f"`vit_or_path` must be a ViTForImageClassification, got {type(vit).__name__}")
        fields = {k: v for k, v in vit.config.to_dict().items() if k not in _NOT_COPIED}
        config = BatchEnsembleViTConfig.from_dict(
            {
                **fields,
                "ensemble_size": ensemble_size,
                "ensemble_layers": None if ensemble_layers is None else list(ensemble_layers),
                "ensemble_sublayers": None if ensemble_sublayers is None else list(ensemble_sublayers),
                "fast_weight_init": fast_weight_init,
                "fast_weight_init_std": fast_weight_init_std,
                "uncertainty_score": uncertainty_score,
            }
        )
        config._attn_implementation = vit.config._attn_implementation
        model = cls(config).to(device=vit.device, dtype=vit.dtype)
        source = vit.state_dict()
        with torch.no_grad():
            for name, tensor in model.state_dict().items():
                if name not in source:
                    if name.rpartition(".")[2] in ("fast_in_norm", "fast_out_norm"):
                        continue
                    raise ValueError(f"the ViT has no weight {name!r} to copy")
                value = source[name]
                if value.shape != tensor.shape:
                    value = value.unsqueeze(0).expand_as(tensor)  # a bias shared by every member
                tensor.copy_(value)
        model.train(vit.training)
        return model

    def member_logits(self, pixel_values: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """The members' logits, `(M, B, C)`."""
        pixel_values = check_pixel_values(pixel_values, "pixel_values")
        hidden_states = self.vit(pixel_values, return_dict=True, **kwargs).last_hidden_state
        return self._head(hidden_states, pixel_values.shape[0])

    def _head(self, hidden_states: torch.Tensor, batch_size: int) -> torch.Tensor:
        pooled = hidden_states[:, 0]
        if pooled.shape[0] == batch_size:  # only the classifier is ensembled: tile the CLS features
            pooled = tile_members(pooled, self.config.ensemble_size)
        logits = self.classifier(pooled)
        return logits.view(self.config.ensemble_size, batch_size, -1)

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> UncertaintyClassifierOutput | tuple:
        r"""
        pixel_values (`torch.Tensor` of shape `(batch_size, num_channels, height, width)`):
            The images (not tiled: the model tiles them per member).
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Class indices. In training mode `loss` is the mean over members of each member's cross-entropy; in
            evaluation mode the NLL of the mean probabilities.
        interpolate_pos_encoding (`bool`, *optional*):
            Interpolate the position embeddings for inputs of another resolution, as in ViT.
        output_hidden_states (`bool`, *optional*):
            Also return the encoder's hidden states (see [`BatchEnsembleViTModel`]).
        """
        pixel_values = check_pixel_values(pixel_values, "pixel_values")
        encoded = self.vit(
            pixel_values,
            interpolate_pos_encoding=interpolate_pos_encoding,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            output_attentions=kwargs.get("output_attentions"),
        )
        member_logits = self._head(encoded.last_hidden_state, pixel_values.shape[0])
        fields = dict(ensemble_output(member_logits, None, self.config.uncertainty_score))
        loss = None
        if labels is not None:
            labels = labels.to(member_logits.device).view(-1)
            if self.training:
                # members are equal-sized tiles, so the mean over all M * B rows is the mean of member means
                loss = nn.functional.cross_entropy(
                    member_logits.flatten(0, 1), tile_members(labels, self.config.ensemble_size)
                )
            else:
                loss = nn.functional.nll_loss(fields["logits"], labels)
        output = UncertaintyClassifierOutput(loss=loss, hidden_states=encoded.hidden_states, **fields)
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return output if return_dict else output.to_tuple()


__all__ = [
    "BatchEnsembleViTForImageClassification",
    "BatchEnsembleViTModel",
    "BatchEnsembleViTPreTrainedModel",
]
