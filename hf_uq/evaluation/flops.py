"""FLOPs of an hf_uq composite, member by member: what each member costs and what the composite adds.

[`member_flops`] answers the cost question of every route in one dict: the FLOPs per image of each member
(the duo's `large` and `small`, a deep ensemble's `member_0` ... `member_{M-1}`, the wrapped `model` of a
temperature-scaled or MC-dropout model), the `total` of one forward of the whole composite, and its
`overhead_pct` over the first member (the duo's large model, ensemble member 0):

```python
>>> from hf_uq.evaluation.flops import member_flops
>>> member_flops(duo, pixel_values)  # doctest: +SKIP
{'large': 729006336, 'small': 73400320, 'total': 802406656, 'overhead_pct': 10.0685...}
```

Every count comes from [`~hf_uq.evaluation.budget.count_flops`] (one forward under `FlopCounterMode`, 2 FLOPs
per multiply-add, elementwise work counted 0), so the members and the total follow one convention, and the
fusion of member logits costs 0 FLOPs by that convention: a duo's `total` is `large + small`, a deep ensemble's
is the sum of its members, an MC-dropout model's is `num_samples` times its model's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .budget import Inputs, flops_per_image

__all__ = ["composite_members", "member_flops"]


def _pixel_values(inputs: Inputs, key: str = "pixel_values") -> Inputs:
    """The member input `key` of a forward's inputs (a bare tensor is `pixel_values` itself)."""
    if isinstance(inputs, torch.Tensor):
        return inputs
    if not isinstance(inputs, Mapping):
        raise ValueError(
            "example_pixel_values must be a tensor or a mapping of forward kwargs, "
            f"got {type(inputs).__name__}"
        )
    value = inputs.get(key)
    if value is None and key != "pixel_values":
        value = inputs.get("pixel_values")
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"example_pixel_values has no tensor `pixel_values` (keys: {sorted(inputs)})")
    return value


def composite_members(model: nn.Module, inputs: Inputs) -> list[tuple[str, nn.Module, Inputs]]:
    """The members of an hf_uq composite as `(name, module, its input)`, the reference member first.

    - an Asymmetric Duo (`large` and `small` submodules): `large` on `pixel_values`, `small` on
      `pixel_values_small` when the inputs carry it (see [`~hf_uq.DuoImageProcessor`]), else on `pixel_values`;
    - a deep ensemble (a `members` `ModuleList`): `member_0`, `member_1`, ...;
    - an hf_uq wrapper around one classifier (temperature scaling, MC dropout: a `model` submodule): `model`
      (only for hf_uq classes: a transformers model's `model` attribute is its backbone, not a member);
    - anything else: the model itself, as `model`.

    Detection is by attribute, so future composites that follow these layouts are covered too.
    """
    large, small = getattr(model, "large", None), getattr(model, "small", None)
    if isinstance(large, nn.Module) and isinstance(small, nn.Module):
        return [
            ("large", large, _pixel_values(inputs)),
            ("small", small, _pixel_values(inputs, "pixel_values_small")),
        ]
    members = getattr(model, "members", None)
    if isinstance(members, nn.ModuleList) and len(members) > 0:
        pixel_values = _pixel_values(inputs)
        return [(f"member_{i}", member, pixel_values) for i, member in enumerate(members)]
    inner = getattr(model, "model", None)
    if isinstance(inner, nn.Module) and type(model).__module__.startswith("hf_uq."):
        return [("model", inner, _pixel_values(inputs))]
    return [("model", model, inputs)]


def member_flops(model: nn.Module, example_pixel_values: Inputs) -> dict[str, Any]:
    """FLOPs per image of each member of `model`, of the whole composite, and the composite's overhead.

    Args:
        model (`nn.Module`):
            An hf_uq composite ([`~hf_uq.DuoForImageClassification`],
            [`~hf_uq.DeepEnsembleForImageClassification`], a temperature-scaled or MC-dropout model) or any
            single classifier (then it is its own only member and the overhead is 0). Members are found by
            [`composite_members`].
        example_pixel_values (`torch.Tensor` or mapping):
            One batch of inputs: the `pixel_values` tensor, or the forward's keyword arguments (e.g. a
            [`~hf_uq.DuoImageProcessor`] output with `pixel_values_small`). Only its shape matters; FLOPs are
            divided by its batch size.

    Returns:
        `dict`: one entry per member name (in member order, the reference member first) with its FLOPs per
        image, then `total`, the FLOPs per image of one forward of `model` itself (measured, not summed: MC
        dropout's repeated passes count), and `overhead_pct = 100 * (total - reference) / reference`, the extra
        compute over running the reference member alone (for a duo: `100 * small / large`). FLOPs are ints
        whenever the batch size divides them, as [`~hf_uq.evaluation.budget.flops_per_image`] gives them.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    members = composite_members(model, example_pixel_values)
    result: dict[str, Any] = {
        name: flops_per_image(member, member_inputs) for name, member, member_inputs in members
    }
    if len(members) == 1 and members[0][1] is model:
        total = result["model"]
    else:
        total = flops_per_image(model, example_pixel_values)
    reference = result[members[0][0]]
    result["total"] = total
    result["overhead_pct"] = 100.0 * (total - reference) / reference if reference else float("nan")
    return result
