"""Monte Carlo dropout (Gal & Ghahramani, ICML 2016): a trained classifier's dropout layers kept active at
inference, each stochastic pass treated as one ensemble member.

`mc_dropout(model, num_samples)` returns an [`MCDropoutModel`] whose forward returns the same
[`UncertaintyClassifierOutput`] as a deep ensemble: `member_logits` (S, B, C) are the S stochastic passes,
`logits` the log of their mean probabilities, and the total / aleatoric / epistemic terms come from
[`hf_uq.functional.ensemble_uncertainty`].

Only `torch.nn` dropout modules (`nn.Dropout`, `nn.Dropout1d/2d/3d`, `nn.AlphaDropout`,
`nn.FeatureAlphaDropout`) with `p > 0` are switched to training mode during the forward pass; every other
module (BatchNorm, stochastic depth, attention modules) stays in eval mode, and every module's mode is
restored afterwards. Dropout that a module applies *functionally* from its own `training` flag (the
attention-probability dropout of transformers' attention layers, the `drop_rate` of timm's ResNet head) is
therefore not sampled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.modules.dropout import _DropoutNd

from .modeling_outputs import UncertaintyClassifierOutput
from .models.member_utils import (
    ENSEMBLE_UNCERTAINTY_SCORES,
    check_pixel_values,
    check_uncertainty_score,
    ensemble_output,
)

__all__ = ["MCDropoutModel", "dropout_modules", "mc_dropout"]


def dropout_modules(model: nn.Module) -> list[nn.Module]:
    """The `torch.nn` dropout modules of `model` with a positive rate, in `model.modules()` order."""
    return [m for m in model.modules() if isinstance(m, _DropoutNd) and m.p > 0]


class MCDropoutModel(nn.Module):
    """
    Monte Carlo dropout around a trained image classifier; build it with [`mc_dropout`].

    Each forward pass runs `num_samples` stochastic passes with only the dropout modules in training mode and
    returns an [`UncertaintyClassifierOutput`] like a deep ensemble's (`member_logits` of shape
    `(num_samples, batch_size, num_labels)`). The wrapped model's modes are restored after every pass, so it
    can keep serving deterministic predictions; the wrapper's own `train()` / `eval()` do not matter.

    Batching: by default the batch is repeated `num_samples` times and sent through the model in **one**
    forward pass of `num_samples * batch_size` rows. Dropout draws an independent mask for every element of
    that tensor, so the S copies of a sample get independent masks, exactly as in S separate passes. This
    assumes the model treats the rows of a batch independently in eval mode, which holds for standard
    classifiers (BatchNorm uses its running statistics in eval mode). Pass `samples_per_pass` to bound the
    memory: the S samples are then split into passes of at most that many copies of the batch.

    Attributes:
        model (`nn.Module`): the wrapped classifier (its weights are shared, not copied).
        num_samples (`int`): S, the stochastic passes per forward.
        seed (`int` or `None`): when set, every forward reseeds a forked RNG with it, so equal inputs give equal
            outputs and the global RNG state is left untouched; the masks then depend on the batch's shape.
        uncertainty_score (`str`): the score reported as `uncertainty` (see `ENSEMBLE_UNCERTAINTY_SCORES`).
        samples_per_pass (`int` or `None`): the most copies of the batch in one forward pass.
    """

    def __init__(
        self,
        model: nn.Module,
        num_samples: int = 10,
        seed: int | None = None,
        uncertainty_score: str = "total",
        samples_per_pass: int | None = None,
    ):
        super().__init__()
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"`num_samples` must be a positive integer, got {num_samples!r}")
        if samples_per_pass is not None and (
            isinstance(samples_per_pass, bool) or not isinstance(samples_per_pass, int) or samples_per_pass < 1
        ):
            raise ValueError(f"`samples_per_pass` must be a positive integer or None, got {samples_per_pass!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"`seed` must be an integer or None, got {seed!r}")
        check_uncertainty_score(uncertainty_score, ENSEMBLE_UNCERTAINTY_SCORES)
        if not dropout_modules(model):
            raise ValueError(
                f"{type(model).__name__} has no dropout module with p > 0 (all its nn.Dropout rates are zero, "
                "or it has none), so MC dropout would return identical samples. Load or build the model with "
                "a nonzero dropout rate (e.g. `hidden_dropout_prob` for ViT). Dropout applied functionally "
                "(attention-probability dropout, timm's head `drop_rate`) is not sampled."
            )
        self.model = model
        self.num_samples = num_samples
        self.seed = seed
        self.uncertainty_score = uncertainty_score
        self.samples_per_pass = samples_per_pass

    @property
    def config(self) -> Any:
        """The wrapped model's config (for `id2label` and friends), or `None`."""
        return getattr(self.model, "config", None)

    @contextlib.contextmanager
    def sampling_mode(self) -> Iterator[None]:
        """Context in which the wrapped model is in eval mode except its dropout modules; every module's mode is
        restored on exit, whatever happens inside."""
        modes = [(module, module.training) for module in self.model.modules()]
        try:
            self.model.eval()
            for module in dropout_modules(self.model):
                module.train()
            yield
        finally:
            for module, training in modes:
                module.training = training

    @contextlib.contextmanager
    def _seeded(self, device: torch.device) -> Iterator[None]:
        """With `seed` set: fork the RNG of CPU and of `device`, and seed both; otherwise do nothing."""
        if self.seed is None:
            yield
            return
        if device.type == "cpu":
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(self.seed)
                yield
            return
        backend = torch.get_device_module(device.type)
        index = device.index if device.index is not None else backend.current_device()
        with torch.random.fork_rng(devices=[index], device_type=device.type), backend.device(index):
            torch.default_generator.manual_seed(self.seed)
            backend.manual_seed(self.seed)  # the current (= this) device only
            yield

    def sample_logits(self, pixel_values: torch.Tensor, **model_kwargs: Any) -> torch.Tensor:
        """The (num_samples, batch_size, num_labels) logits of the stochastic passes."""
        pixel_values = check_pixel_values(pixel_values, "pixel_values")
        batch_size = pixel_values.shape[0]
        per_pass = min(self.samples_per_pass or self.num_samples, self.num_samples)
        chunks = []
        with self._seeded(pixel_values.device), self.sampling_mode():
            for start in range(0, self.num_samples, per_pass):
                copies = min(per_pass, self.num_samples - start)
                repeated = pixel_values.repeat(copies, 1, 1, 1)
                logits = _logits(self.model(pixel_values=repeated, **model_kwargs))
                chunks.append(logits.reshape(copies, batch_size, -1))
        return torch.cat(chunks)

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **model_kwargs: Any,
    ) -> UncertaintyClassifierOutput | tuple:
        r"""
        pixel_values (`torch.Tensor` of shape `(batch_size, num_channels, height, width)`):
            Input of the wrapped model (repeated once per sample).
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Labels for the loss: the NLL of the mean sample probabilities.
        model_kwargs (*optional*):
            Passed to the wrapped model unchanged (not repeated), e.g. `interpolate_pos_encoding=True`.
        """
        if pixel_values is None:
            raise ValueError("`pixel_values` is required")
        output = ensemble_output(self.sample_logits(pixel_values, **model_kwargs), labels, self.uncertainty_score)
        return output if return_dict is not False else output.to_tuple()

    def extra_repr(self) -> str:
        return (
            f"num_samples={self.num_samples}, seed={self.seed}, uncertainty_score={self.uncertainty_score!r}, "
            f"samples_per_pass={self.samples_per_pass}"
        )


def _logits(output: Any) -> torch.Tensor:
    """Logits from a transformers output, a tuple whose first entry is the logits, or a tensor."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if logits is None and isinstance(output, (tuple, list)) and output:
        logits = output[0]
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        raise ValueError(
            "MC dropout needs a model returning (batch, num_labels) logits (a tensor, an output with `.logits`, "
            f"or a tuple starting with them), got {type(output).__name__}"
        )
    return logits


def mc_dropout(
    model: nn.Module,
    num_samples: int = 10,
    seed: int | None = None,
    *,
    uncertainty_score: str = "total",
    samples_per_pass: int | None = None,
) -> MCDropoutModel:
    """Wrap a trained image classifier for Monte Carlo dropout inference.

    Args:
        model (`nn.Module`):
            The classifier, e.g. a `ViTForImageClassification`; called as `model(pixel_values=...)` and returning
            logits (an output with `.logits`, a tuple starting with them, or a tensor). It must hold at least
            one `torch.nn` dropout module with `p > 0`.
        num_samples (`int`, *optional*, defaults to 10):
            S, the stochastic passes averaged per forward.
        seed (`int`, *optional*):
            Makes every forward reproducible (see [`MCDropoutModel`]); `None` draws from the global RNG.
        uncertainty_score (`str`, *optional*, defaults to `"total"`):
            The score reported as `uncertainty`: `"total"` (predictive entropy), `"aleatoric"`, `"epistemic"`
            (mutual information), `"msp"` or `"margin"` of the mean probabilities.
        samples_per_pass (`int`, *optional*):
            The most copies of the batch sent through the model at once; default all S in one pass.

    Returns:
        [`MCDropoutModel`]: the wrapper; the model itself is not modified.

    Raises:
        `ValueError`: when the model has no dropout module with `p > 0`.

    Example:

    ```python
    >>> import torch, hf_uq
    >>> from hf_uq.models.tiny import tiny_vit
    >>> mc = hf_uq.mc_dropout(tiny_vit(hidden_dropout_prob=0.1), num_samples=8, seed=0)
    >>> out = mc(pixel_values=torch.randn(2, 3, 16, 16))
    >>> out.member_logits.shape, out.epistemic_uncertainty.shape
    (torch.Size([8, 2, 8]), torch.Size([2]))
    ```
    """
    return MCDropoutModel(
        model,
        num_samples=num_samples,
        seed=seed,
        uncertainty_score=uncertainty_score,
        samples_per_pass=samples_per_pass,
    )
