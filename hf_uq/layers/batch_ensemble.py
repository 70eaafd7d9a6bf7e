"""BatchEnsemble layers (Wen, Tran and Ba, "BatchEnsemble: an Alternative Approach to Efficient Ensemble and
Lifelong Learning", ICLR 2020), reimplemented from the paper.

Member `i` of a BatchEnsemble linear layer uses the weight `W_i = W * (s_i r_i^T)`: one shared ("slow") weight
`W` of shape `(out_features, in_features)` modulated by a rank-1 matrix built from two per-member "fast" vectors,
`r_i` over the inputs and `s_i` over the outputs. Because `x W_i^T = ((x * r_i) W^T) * s_i`, all members run in
one batched matrix multiplication with the shared weight, and no per-member weight is ever materialized. M
members cost `M * (in_features + 2 * out_features)` parameters on top of one layer.

Batch layout: members are contiguous blocks of the batch ("member-major"). A tensor of shape `(M * B, ...)`
holds member 0's `B` rows first, then member 1's, and so on: exactly what [`tile_members`] (`x.repeat(M, ...)`)
produces from a `(B, ...)` batch, and what `y.view(M, B, ...)` splits back into members.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "FAST_WEIGHT_INITS",
    "FAST_WEIGHT_NAMES",
    "BatchEnsembleLinear",
    "fast_weight_parameter_names",
    "init_fast_weights_",
    "scale_member_inputs",
    "scale_shift_member_outputs",
    "split_members",
    "tile_members",
]

#: Initializations of the fast weights: `"random_sign"` (each entry +1 or -1 with probability 1/2, the paper's
#: choice), `"normal"` (entries drawn from N(1, std^2): members start as perturbations of the shared weight) and
#: `"ones"` (every member equals the shared layer: no diversity until something else breaks the symmetry).
FAST_WEIGHT_INITS = ("random_sign", "normal", "ones")

#: Parameter names of the fast weights `r` (inputs) and `s` (outputs) inside a [`BatchEnsembleLinear`]. The
#: `_norm` suffix is what `transformers.Trainer.get_decay_parameter_names` excludes from weight decay (its
#: pattern `_norm(?:$|\.)`, meant for normalization gains): like a LayerNorm gain, a fast weight is a per-feature
#: multiplicative gain whose neutral value is 1, and decaying it towards 0 would shrink members instead of
#: regularizing them. The stock `Trainer` (and [`hf_uq.training.fit_classifier`]) therefore leave them undecayed
#: without any configuration.
FAST_WEIGHT_NAMES = ("fast_in_norm", "fast_out_norm")


def init_fast_weights_(tensor: torch.Tensor, method: str = "random_sign", std: float = 0.5) -> torch.Tensor:
    """Fill fast weights in place with one of [`FAST_WEIGHT_INITS`].

    Args:
        tensor (`torch.Tensor`):
            The fast weights, e.g. of shape `(ensemble_size, features)`.
        method (`str`, *optional*, defaults to `"random_sign"`):
            `"random_sign"` (+1 or -1, each with probability 1/2), `"normal"` (N(1, `std`^2)) or `"ones"`.
        std (`float`, *optional*, defaults to 0.5):
            Standard deviation of the `"normal"` initialization; ignored otherwise.

    Returns:
        `torch.Tensor`: `tensor`.
    """
    if method not in FAST_WEIGHT_INITS:
        raise ValueError(f"`fast_weight_init` must be one of {FAST_WEIGHT_INITS}, got {method!r}")
    with torch.no_grad():
        if method == "ones":
            tensor.fill_(1.0)
        elif method == "normal":
            tensor.normal_(mean=1.0, std=std)
        else:
            tensor.bernoulli_(0.5).mul_(2.0).sub_(1.0)
    return tensor


def tile_members(x: torch.Tensor, ensemble_size: int) -> torch.Tensor:
    """Repeat a `(B, ...)` batch for `ensemble_size` members in the member-major layout: `(M * B, ...)`."""
    return x.repeat(ensemble_size, *([1] * (x.ndim - 1)))


def split_members(hidden_states: torch.Tensor, ensemble_size: int, in_features: int) -> torch.Tensor:
    """The `(M * B, ..., in_features)` input of a BatchEnsemble layer as `(M, rows, in_features)` blocks, one per
    member; a `ValueError` when the batch is not a multiple of `ensemble_size` (shared by the float layer and its
    quantized variants)."""
    batch = hidden_states.shape[0]
    if batch % ensemble_size:
        raise ValueError(
            f"BatchEnsembleLinear with {ensemble_size} members got a batch of {batch} rows, not a multiple of "
            f"{ensemble_size}: tile the batch first (`tile_members`)"
        )
    return hidden_states.reshape(ensemble_size, -1, in_features)


def scale_member_inputs(x: torch.Tensor, scale: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """`x * r_i` for the `(M, rows, in_features)` member blocks `x` and `scale` = `r` as `(M, 1, in_features)`; in
    place when `in_place` and autograd is off (for inputs nothing else reads, see `scale_input_in_place`). Shared
    by the float layer and its quantized variants."""
    return x.mul_(scale) if in_place and not torch.is_grad_enabled() else x * scale


def scale_shift_member_outputs(y: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`y * s_i + b_i` for the `(M, rows, out_features)` member blocks `y` of a fresh matmul output, `scale` of shape
    `(M, 1, out_features)` and `bias` of shape `(M, out_features)` or `None`.

    Without autograd it works in place on `y`: one pass and no new allocation (a large fresh CPU buffer costs page
    faults that can exceed the pass itself). With autograd the unscaled `y` is needed for the gradient of `s`, so a
    new tensor is made. Shared by the float layer and its quantized variants.
    """
    inplace = not torch.is_grad_enabled()
    if bias is None:
        return y.mul_(scale) if inplace else y * scale
    return torch.addcmul(bias.unsqueeze(1), y, scale, out=y if inplace else None)


class BatchEnsembleLinear(nn.Module):
    r"""
    A linear layer shared by `ensemble_size` members, each with its own rank-1 fast weights and bias.

    For member `i` and an input row `x` of that member,

        y = ((x * r_i) W^T) * s_i + b_i,

    i.e. the member's weight is `W * (s_i r_i^T)` (element-wise) without ever being built. The input carries the
    members as contiguous blocks of its first dimension (see the module docstring): `(M * B, ..., in_features)`,
    e.g. token tensors `(M * B, T, D)`; any number of middle dimensions is allowed.

    The shared weight is a plain `weight` parameter (decayed by `transformers.Trainer` like any weight); the
    per-member `bias` and the fast weights (named in [`FAST_WEIGHT_NAMES`]) are not decayed by the stock `Trainer`.

    Cost: one matrix multiplication with the shared weight over all `M * B` rows, plus one element-wise pass over
    the input (`x * r`) and one over the output (`* s + b`, in place when autograd is off, where it replaces the
    bias add of `nn.Linear`). Against a plain `nn.Linear` on the same `M * B` rows that is one extra element-wise
    pass over the input (in place with `scale_input_in_place`). Without autograd, when each member has more rows
    than the layer has outputs, the members' weights are built instead (`M * in * out` multiplications, less than
    the input pass) and one batched matmul does the rest: the cost of a plain `nn.Linear`.

    Args:
        in_features (`int`):
            Size of each input row.
        out_features (`int`):
            Size of each output row.
        ensemble_size (`int`):
            Number of members M.
        bias (`bool`, *optional*, defaults to `True`):
            Learn one bias vector per member.
        fast_weight_init (`str`, *optional*, defaults to `"random_sign"`):
            Initialization of the fast weights, one of [`FAST_WEIGHT_INITS`].
        fast_weight_init_std (`float`, *optional*, defaults to 0.5):
            Standard deviation of the `"normal"` initialization.
        scale_input_in_place (`bool`, *optional*, defaults to `False`):
            When autograd is off, multiply the input by `r` in place instead of into a new tensor. Only for callers
            whose input is a temporary that nothing reads afterwards (e.g. an MLP's activation output): it saves
            allocating (and page-faulting) a tensor the size of the input, ~10 % of a ViT block's time on CPU.

    Attributes:
        weight (`nn.Parameter` of shape `(out_features, in_features)`): the shared weight `W`.
        fast_in_norm (`nn.Parameter` of shape `(ensemble_size, in_features)`): the input fast weights `r_i`.
        fast_out_norm (`nn.Parameter` of shape `(ensemble_size, out_features)`): the output fast weights `s_i`.
        bias (`nn.Parameter` of shape `(ensemble_size, out_features)` or `None`): the members' biases `b_i`.

    Example:

    ```python
    >>> import torch
    >>> from hf_uq.layers import BatchEnsembleLinear, tile_members
    >>> layer = BatchEnsembleLinear.from_linear(torch.nn.Linear(32, 64), ensemble_size=4)
    >>> x = torch.randn(8, 17, 32)            # (batch, tokens, features)
    >>> y = layer(tile_members(x, 4))         # (4 * 8, 17, 64): member i is y[8 * i : 8 * (i + 1)]
    >>> y.view(4, 8, 17, 64).shape
    torch.Size([4, 8, 17, 64])
    ```
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        ensemble_size: int,
        bias: bool = True,
        fast_weight_init: str = "random_sign",
        fast_weight_init_std: float = 0.5,
        scale_input_in_place: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        if ensemble_size < 1:
            raise ValueError(f"`ensemble_size` must be at least 1, got {ensemble_size}")
        if fast_weight_init not in FAST_WEIGHT_INITS:
            raise ValueError(f"`fast_weight_init` must be one of {FAST_WEIGHT_INITS}, got {fast_weight_init!r}")
        factory = {"device": device, "dtype": dtype}
        self.in_features = in_features
        self.out_features = out_features
        self.ensemble_size = ensemble_size
        self.fast_weight_init = fast_weight_init
        self.fast_weight_init_std = fast_weight_init_std
        self.scale_input_in_place = scale_input_in_place
        self.weight = nn.Parameter(torch.empty(out_features, in_features, **factory))
        self.fast_in_norm = nn.Parameter(torch.empty(ensemble_size, in_features, **factory))
        self.fast_out_norm = nn.Parameter(torch.empty(ensemble_size, out_features, **factory))
        self.bias = nn.Parameter(torch.empty(ensemble_size, out_features, **factory)) if bias else None
        self.reset_parameters()

    @property
    def r(self) -> torch.Tensor:
        """The input fast weights `r`, `(ensemble_size, in_features)`."""
        return self.fast_in_norm

    @property
    def s(self) -> torch.Tensor:
        """The output fast weights `s`, `(ensemble_size, out_features)`."""
        return self.fast_out_norm

    def reset_parameters(self) -> None:
        """`nn.Linear`'s initialization of the shared weight and biases, then [`reset_fast_weights`]."""
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)
        if self.bias is not None:
            bound = 1 / self.in_features**0.5 if self.in_features > 0 else 0.0
            nn.init.uniform_(self.bias, -bound, bound)
        self.reset_fast_weights()

    def reset_fast_weights(self, fast_weight_init: str | None = None, std: float | None = None) -> None:
        """Re-draw the fast weights (with the layer's own initialization unless another is given)."""
        method = self.fast_weight_init if fast_weight_init is None else fast_weight_init
        std = self.fast_weight_init_std if std is None else std
        init_fast_weights_(self.fast_in_norm, method, std)
        init_fast_weights_(self.fast_out_norm, method, std)

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        ensemble_size: int,
        fast_weight_init: str = "random_sign",
        fast_weight_init_std: float = 0.5,
    ) -> BatchEnsembleLinear:
        """Build a BatchEnsemble layer sharing a copy of `linear`'s weight; every member starts from its bias.

        Args:
            linear (`nn.Linear`):
                The layer to convert; its weight is copied (not shared) and its bias repeated for every member.
            ensemble_size (`int`):
                Number of members M.
            fast_weight_init (`str`, *optional*, defaults to `"random_sign"`):
                One of [`FAST_WEIGHT_INITS`]; with `"ones"` every member computes exactly `linear`.
            fast_weight_init_std (`float`, *optional*, defaults to 0.5):
                Standard deviation of the `"normal"` initialization.

        Returns:
            [`BatchEnsembleLinear`] on `linear`'s device and dtype.
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"`linear` must be an nn.Linear, got {type(linear).__name__}")
        layer = cls(
            linear.in_features,
            linear.out_features,
            ensemble_size,
            bias=linear.bias is not None,
            fast_weight_init=fast_weight_init,
            fast_weight_init_std=fast_weight_init_std,
            device=linear.weight.device,
            dtype=linear.weight.dtype,
        )
        with torch.no_grad():
            layer.weight.copy_(linear.weight)
            if linear.bias is not None:
                layer.bias.copy_(linear.bias.unsqueeze(0).expand_as(layer.bias))
        return layer

    def member_linear(self, member: int) -> nn.Linear:
        """Member `member` as a plain `nn.Linear` with the materialized weight `W * (s_i r_i^T)` (for checks)."""
        if not -self.ensemble_size <= member < self.ensemble_size:
            raise IndexError(f"member {member} out of range for {self.ensemble_size} members")
        linear = nn.Linear(
            self.in_features,
            self.out_features,
            bias=self.bias is not None,
            device=self.weight.device,
            dtype=self.weight.dtype,
        )
        with torch.no_grad():
            linear.weight.copy_(self.weight * torch.outer(self.fast_out_norm[member], self.fast_in_norm[member]))
            if self.bias is not None:
                linear.bias.copy_(self.bias[member])
        return linear

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        members = self.ensemble_size
        lead = hidden_states.shape[:-1]
        # (M, N, in): each member's rows (all tokens of its B samples) as one block
        x = split_members(hidden_states, members, self.in_features)
        if not torch.is_grad_enabled() and x.shape[1] > self.out_features:
            return self._materialized_forward(x).reshape(*lead, self.out_features)
        x = scale_member_inputs(x, self.fast_in_norm.unsqueeze(1), self.scale_input_in_place)
        y = scale_shift_member_outputs(torch.matmul(x, self.weight.t()), self.fast_out_norm.unsqueeze(1), self.bias)
        return y.reshape(*lead, self.out_features)

    def _materialized_forward(self, x: torch.Tensor) -> torch.Tensor:
        """Inference with the members' weights `W * (s_i r_i^T)` built (`(M, out, in)`) and one batched matmul that
        adds the biases: no pass over the input or the output beyond the matmul's own. Building them costs
        `M * in * out` multiplications against `M * rows * in` for scaling the input, so `forward` takes this path
        when a member has more rows than the layer has outputs (e.g. 8-13 % faster per layer at ViT-Tiny width,
        batch 32, one thread); results agree with the factored path to float rounding."""
        weight = self.weight * (self.fast_out_norm.unsqueeze(2) * self.fast_in_norm.unsqueeze(1))
        if self.bias is None:
            return torch.bmm(x, weight.transpose(1, 2))
        return torch.baddbmm(self.bias.unsqueeze(1), x, weight.transpose(1, 2))

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, ensemble_size={self.ensemble_size}, "
            f"bias={self.bias is not None}, fast_weight_init={self.fast_weight_init!r}"
        )


def fast_weight_parameter_names(model: nn.Module) -> list[str]:
    """Names (as in `model.named_parameters()`) of every fast weight of the [`BatchEnsembleLinear`] layers in
    `model`: the parameters to keep out of weight decay in a custom optimizer."""
    names = []
    for prefix, module in model.named_modules():
        if isinstance(module, BatchEnsembleLinear):
            names.extend(f"{prefix}.{name}" if prefix else name for name in FAST_WEIGHT_NAMES)
    return names
