"""Tiny image classifiers for tests, demos and the embedded digits benchmark, built offline from configs.

Two families, so that every hf_uq route is exercised on a transformers-native model and on a timm model:

- [`tiny_vit`]: a `ViTForImageClassification` (4 layers, 64 wide by default) for 16x16 inputs, patch size 4.
- [`tiny_cnn`]: a `TimmWrapperForImageClassification` around a tiny four-stage timm ResNet for 16x16 inputs.

Both take `pixel_values` of shape `(batch, 3, 16, 16)`; [`tiny_vit_image_processor`] and
[`tiny_cnn_image_processor`] (or [`tiny_image_processor`] for either model) produce them from the 8x8 grayscale
digits, upsampling bilinearly and normalizing with the digits' mean and std. A model and its processor round-trip
through `save_pretrained` and `AutoModelForImageClassification` / `AutoImageProcessor`.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    TimmWrapperConfig,
    TimmWrapperForImageClassification,
    TimmWrapperImageProcessor,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessor,
)
from transformers.image_utils import PILImageResampling

from ..data.digits import DIGITS_ID2LABEL, DIGITS_IMAGE_MEAN, DIGITS_IMAGE_STD

__all__ = [
    "TINY_CNN_ARCHITECTURE",
    "tiny_cnn",
    "tiny_cnn_image_processor",
    "tiny_image_processor",
    "tiny_vit",
    "tiny_vit_image_processor",
]

#: timm architecture the tiny CNN starts from; its depth and widths are overridden through `model_args`.
TINY_CNN_ARCHITECTURE = "resnet18"


def _labels(
    num_labels: int, id2label: dict[int, str] | None
) -> tuple[dict[int, str], dict[str, int]]:
    if id2label is None:
        id2label = (
            DIGITS_ID2LABEL
            if num_labels == len(DIGITS_ID2LABEL)
            else {i: str(i) for i in range(num_labels)}
        )
    id2label = {int(k): str(v) for k, v in id2label.items()}
    if len(id2label) != num_labels:
        raise ValueError(f"id2label has {len(id2label)} entries but num_labels is {num_labels}")
    return id2label, {v: k for k, v in id2label.items()}


def tiny_vit(
    num_labels: int = 8,
    id2label: dict[int, str] | None = None,
    seed: int = 0,
    image_size: int = 16,
    hidden_size: int = 64,
    num_hidden_layers: int = 4,
    num_attention_heads: int = 4,
    intermediate_size: int = 128,
    patch_size: int = 4,
    hidden_dropout_prob: float = 0.1,
    attention_probs_dropout_prob: float = 0.0,
    num_channels: int = 3,
    **config_kwargs,
) -> ViTForImageClassification:
    """Builds a small, randomly initialized `ViTForImageClassification` sized for upsampled digits.

    The default (4 layers, width 64, 16 patches of 4x4 plus the CLS token, ~0.14M parameters) reaches ~96 % test
    accuracy on the digits benchmark. `hidden_dropout_prob` is small but nonzero so that MC dropout has something
    to sample.

    Args:
        num_labels (`int`, *optional*, defaults to 8):
            Number of classes.
        id2label (`dict[int, str]`, *optional*):
            Class names; defaults to the digits' `{0: "0", ..., 7: "7"}` (or `str(i)` for other `num_labels`).
        seed (`int`, *optional*, defaults to 0):
            Seed of the weight initialization. The global torch RNG state is restored afterwards.
        image_size (`int`, *optional*, defaults to 16):
            Input resolution; must match the image processor's output size.
        hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, patch_size (`int`, *optional*):
            Transformer dimensions (defaults 64, 4, 4, 128, 4).
        hidden_dropout_prob (`float`, *optional*, defaults to 0.1):
            Dropout on embeddings, attention outputs and MLP outputs.
        attention_probs_dropout_prob (`float`, *optional*, defaults to 0.0):
            Dropout on attention probabilities.
        num_channels (`int`, *optional*, defaults to 3):
            Input channels. Keep 3 to share inputs with [`tiny_cnn`] and with RGB datasets.
        config_kwargs (*optional*):
            Any other `ViTConfig` field.

    Returns:
        `ViTForImageClassification` in training mode.
    """
    id2label, label2id = _labels(num_labels, id2label)
    config = ViTConfig(
        image_size=image_size,
        patch_size=patch_size,
        num_channels=num_channels,
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        intermediate_size=intermediate_size,
        hidden_dropout_prob=hidden_dropout_prob,
        attention_probs_dropout_prob=attention_probs_dropout_prob,
        id2label=id2label,
        label2id=label2id,
        **config_kwargs,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ViTForImageClassification(config)
    return model


def tiny_cnn(
    num_labels: int = 8,
    id2label: dict[int, str] | None = None,
    seed: int = 0,
    image_size: int = 16,
    channels: tuple[int, ...] = (16, 32, 64, 64),
    layers: tuple[int, ...] = (1, 1, 1, 1),
    stem_width: int = 8,
    drop_rate: float = 0.1,
    timm_init: bool = True,
    **model_args,
) -> TimmWrapperForImageClassification:
    """Builds a small, randomly initialized timm ResNet wrapped in `TimmWrapperForImageClassification`.

    The network is timm's `resnet18` definition with its depth and widths overridden through
    `TimmWrapperConfig.model_args` (nothing is downloaded): a deep 3x3 stem of width `stem_width`, four stages of
    one basic block each, and an output stride of 8 (the last two stages dilate instead of striding) so that a 16x16 input keeps a 2x2 final feature map. The
    image processor settings are stored in `config.pretrained_cfg`, which is where `TimmWrapperImageProcessor` reads
    them after `save_pretrained`.

    The transformers wrapper re-initializes every convolution and linear layer with normal(0, 0.02) when it is
    built; with `timm_init=True` (default) timm's own initialization (Kaiming-normal convolutions, zero-initialized
    last norm of each residual branch) is applied again afterwards, which trains faster and more reliably.

    Args:
        num_labels (`int`, *optional*, defaults to 8):
            Number of classes.
        id2label (`dict[int, str]`, *optional*):
            Class names; defaults to the digits' `{0: "0", ..., 7: "7"}`.
        seed (`int`, *optional*, defaults to 0):
            Seed of the weight initialization. The global torch RNG state is restored afterwards.
        image_size (`int`, *optional*, defaults to 16):
            Input resolution produced by the matching processor.
        channels (`tuple[int, ...]`, *optional*, defaults to `(16, 32, 64, 64)`):
            Widths of the four residual stages (timm's ResNet always runs exactly four).
        layers (`tuple[int, ...]`, *optional*, defaults to `(1, 1, 1, 1)`):
            Basic blocks per stage.
        stem_width (`int`, *optional*, defaults to 8):
            Width of the deep stem (its output has `2 * stem_width` channels).
        drop_rate (`float`, *optional*, defaults to 0.1):
            Dropout before the classifier (lets MC dropout sample this model too).
        timm_init (`bool`, *optional*, defaults to `True`):
            Re-apply timm's initialization after the wrapper's normal(0.02) initialization.
        model_args (*optional*):
            Further keyword arguments for `timm.create_model` (stored in `config.model_args`, so JSON values only).

    Returns:
        `TimmWrapperForImageClassification` in training mode.
    """
    id2label, label2id = _labels(num_labels, id2label)
    if len(channels) != len(layers):
        raise ValueError(f"channels {channels} and layers {layers} must have the same length")
    timm_args = {
        "layers": list(layers),
        "channels": list(channels),
        "stem_type": "deep",
        "stem_width": stem_width,
        "output_stride": 8,
        "drop_rate": drop_rate,
        **model_args,
    }
    config = TimmWrapperConfig(
        architecture=TINY_CNN_ARCHITECTURE,
        model_args=timm_args,
        id2label=id2label,
        label2id=label2id,
        pretrained_cfg=_timm_pretrained_cfg(image_size, num_labels),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TimmWrapperForImageClassification(config)
        if timm_init and hasattr(model.timm_model, "init_weights"):
            model.timm_model.init_weights()
    return model


def _timm_pretrained_cfg(image_size: int, num_labels: int) -> dict[str, Any]:
    """The timm `pretrained_cfg` describing the digits preprocessing (what `TimmWrapperImageProcessor` reads)."""
    return {
        "input_size": [3, image_size, image_size],
        "interpolation": "bilinear",
        "mean": list(DIGITS_IMAGE_MEAN),
        "std": list(DIGITS_IMAGE_STD),
        "crop_pct": 1.0,
        "crop_mode": "center",
        "num_classes": num_labels,
    }


def tiny_vit_image_processor(image_size: int = 16) -> ViTImageProcessor:
    """Image processor for [`tiny_vit`]: RGB conversion, bilinear resize to `image_size`, digits normalization.

    Args:
        image_size (`int`, *optional*, defaults to 16):
            Output height and width (8x8 digits are upsampled 2x by default).

    Returns:
        `ViTImageProcessor` producing `pixel_values` of shape `(batch, 3, image_size, image_size)`.
    """
    return ViTImageProcessor(
        do_resize=True,
        size={"height": image_size, "width": image_size},
        resample=PILImageResampling.BILINEAR,
        do_rescale=True,
        rescale_factor=1 / 255,
        do_normalize=True,
        image_mean=list(DIGITS_IMAGE_MEAN),
        image_std=list(DIGITS_IMAGE_STD),
        do_convert_rgb=True,
    )


def tiny_cnn_image_processor(
    model_or_image_size: TimmWrapperForImageClassification | int = 16,
) -> TimmWrapperImageProcessor:
    """Image processor for [`tiny_cnn`]: timm's evaluation transform built from the model's `pretrained_cfg`.

    `TimmWrapperImageProcessor.save_pretrained` deliberately writes nothing: the settings live in the model's
    `config.json`, so save the model to the same folder and `AutoImageProcessor.from_pretrained` finds them there.
    timm's transform does not convert grayscale to RGB; feed it through [`~hf_uq.data.with_pixel_values`], which
    does.

    Args:
        model_or_image_size (`TimmWrapperForImageClassification` or `int`, *optional*, defaults to 16):
            A model built by [`tiny_cnn`] (its `config.pretrained_cfg` is used), or an output size.

    Returns:
        `TimmWrapperImageProcessor` producing `pixel_values` of shape `(batch, 3, image_size, image_size)`.
    """
    if isinstance(model_or_image_size, int):
        pretrained_cfg = _timm_pretrained_cfg(model_or_image_size, len(DIGITS_ID2LABEL))
        architecture = TINY_CNN_ARCHITECTURE
    else:
        config = model_or_image_size.config
        pretrained_cfg = getattr(config, "pretrained_cfg", None)
        if pretrained_cfg is None:
            raise ValueError(
                "The model's config has no `pretrained_cfg`; build the model with `tiny_cnn`."
            )
        architecture = config.architecture
    return TimmWrapperImageProcessor(pretrained_cfg=dict(pretrained_cfg), architecture=architecture)


def tiny_image_processor(model: ViTForImageClassification | TimmWrapperForImageClassification):
    """The matching image processor for a model built by [`tiny_vit`] or [`tiny_cnn`].

    Args:
        model (`ViTForImageClassification` or `TimmWrapperForImageClassification`):
            The model.

    Returns:
        `ViTImageProcessor` or `TimmWrapperImageProcessor`.
    """
    if isinstance(model, TimmWrapperForImageClassification):
        return tiny_cnn_image_processor(model)
    if isinstance(model.config, ViTConfig):
        image_size = model.config.image_size
        image_size = image_size if isinstance(image_size, int) else int(image_size[0])
        return tiny_vit_image_processor(image_size)
    raise TypeError(f"No tiny image processor for {type(model).__name__}")
