"""Helpers shared by the composite models (duo, deep ensemble, temperature scaling, MC dropout): loading
members, their configs and their label spaces, collecting logits for temperature fitting, and assembling
the output of an ensemble from its members' logits."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForImageClassification, PreTrainedConfig, PreTrainedModel
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from ..functional.decomposition import ensemble_uncertainty
from ..functional.scores import LOGIT_SCORES, SCORES
from ..modeling_outputs import UncertaintyClassifierOutput


def member_config_from_dict(config: PreTrainedConfig | dict[str, Any], name: str) -> PreTrainedConfig:
    """Rebuild a member config from its serialized dict with the member class's own ``from_dict``.

    ``from_dict`` (not ``cls(**d)``) matters: ``TimmWrapperConfig`` stores its labels as
    ``label_names`` and only restores ``id2label`` in ``from_dict``.
    """
    if isinstance(config, PreTrainedConfig):
        return config
    if not isinstance(config, dict):
        raise TypeError(f"`{name}` must be a config or a dict, got {type(config).__name__}")
    model_type = config.get("model_type")
    if model_type not in CONFIG_MAPPING:
        raise ValueError(
            f"`{name}` has model_type {model_type!r}, which transformers does not know; import the "
            "package that registers it first"
        )
    return CONFIG_MAPPING[model_type].from_dict(dict(config))


def load_member(model: PreTrainedModel | str | os.PathLike, name: str, **kwargs: Any) -> PreTrainedModel:
    """A model instance as is, or ``AutoModelForImageClassification.from_pretrained`` of a folder or Hub id.

    A string that is not an existing folder but looks like a path (starts with ``.``, ``/`` or
    ``~``, or has more than one ``/``) raises ``ValueError`` instead of being sent to the Hub.
    """
    if isinstance(model, PreTrainedModel):
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"{name} must be a PreTrainedModel, a folder or a Hub id, got {type(model).__name__}")
    path = os.fspath(model)
    if not os.path.isdir(os.path.expanduser(path)):
        if path.startswith((".", "/", "~")) or path.count("/") > 1:
            raise ValueError(f"{name}: no model folder at {path!r}")
    try:
        return AutoModelForImageClassification.from_pretrained(os.path.expanduser(path), **kwargs)
    except OSError as err:
        raise ValueError(f"{name}: could not load {path!r} as an image classifier: {err}") from err


def id2label_of(config: PreTrainedConfig) -> dict[int, str]:
    return {int(k): str(v) for k, v in (config.id2label or {}).items()}


def label_order(
    reference: dict[int, str], other: dict[int, str], names: Sequence[str], align: bool
) -> list[int] | None:
    """How to index ``other``'s logits so they follow ``reference``'s label order.

    Returns ``None`` when the label spaces are identical, the index list when ``align`` is set
    and ``other`` holds the same names in another order, and raises ``ValueError`` otherwise.
    """
    ref_name, other_name = names
    if len(reference) != len(other):
        raise ValueError(
            f"{ref_name} has {len(reference)} labels but {other_name} has {len(other)}: members must "
            "share one label space"
        )
    if reference == other:
        return None
    if sorted(reference.values()) != sorted(other.values()):
        missing = sorted(set(reference.values()) - set(other.values()))[:5]
        raise ValueError(
            f"{ref_name} and {other_name} have different label names (e.g. {missing} only in "
            f"{ref_name}): members must share one label space"
        )
    if not align:
        diff = next(i for i in sorted(reference) if reference[i] != other.get(i))
        raise ValueError(
            f"{ref_name} and {other_name} order their labels differently (index {diff}: "
            f"{reference[diff]!r} vs {other.get(diff)!r}); pass align_labels=True to reorder "
            f"{other_name}'s logits"
        )
    position = {label: i for i, label in other.items()}
    return [position[reference[i]] for i in range(len(reference))]


def check_pixel_values(pixel_values: Any, name: str) -> torch.Tensor:
    """A (batch, channels, height, width) floating tensor, else a ValueError naming the problem."""
    if not isinstance(pixel_values, torch.Tensor):
        raise ValueError(f"`{name}` must be a torch.Tensor, got {type(pixel_values).__name__}")
    if pixel_values.ndim != 4:
        raise ValueError(
            f"`{name}` must have shape (batch, channels, height, width), got {tuple(pixel_values.shape)}"
        )
    if not torch.is_floating_point(pixel_values):
        raise ValueError(f"`{name}` must be a floating tensor, got {pixel_values.dtype}")
    return pixel_values


@torch.no_grad()
def collect_logits(
    model: nn.Module,
    dataloader: Iterable[Mapping[str, Any]],
    logits_fn: Callable[[dict[str, Any]], Sequence[torch.Tensor]],
    desc: str,
    progress: bool = True,
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Run ``logits_fn`` over a labelled dataloader in eval mode; the inputs of temperature fitting.

    Args:
        model: the module whose mode is switched to eval for the pass (and restored afterwards) and
            whose first parameter's device the batches' tensors are moved to.
        dataloader: yields mappings with ``pixel_values`` (and any other inputs ``logits_fn`` reads) and
            ``labels`` (or ``label``).
        logits_fn: maps one batch (tensors already on the model's device) to a sequence of (B, C) logits.
        desc: the progress bar's description.
        progress: whether to show the progress bar.

    Returns:
        The concatenated float32 CPU logits, one tensor per output of ``logits_fn``, and the (N,) labels.
    """
    from tqdm.auto import tqdm

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    outputs: list[list[torch.Tensor]] = []
    labels: list[torch.Tensor] = []
    try:
        for batch in tqdm(dataloader, desc=desc, leave=False, disable=not progress):
            if not isinstance(batch, Mapping):
                raise ValueError(f"every batch must be a mapping of inputs, got {type(batch).__name__}")
            if "labels" not in batch and "label" not in batch:
                raise ValueError("every batch needs `labels` to fit temperatures")
            on_device = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            logits = list(logits_fn(on_device))
            if not outputs:
                outputs = [[] for _ in logits]
            for store, z in zip(outputs, logits, strict=True):
                store.append(z.float().cpu())
            labels.append(torch.as_tensor(batch["labels"] if "labels" in batch else batch["label"]).cpu())
    finally:
        model.train(was_training)
    if not labels:
        raise ValueError("the dataloader yielded no batches")
    return [torch.cat(store) for store in outputs], torch.cat(labels)


#: Scores an ensemble (deep ensemble, MC dropout) can report as `uncertainty`: the three terms of
#: `hf_uq.functional.ensemble_uncertainty` and the scores of the mean probabilities. Logit scores
#: (`max_logit`, `energy`) are not offered: on log mean probabilities they are constant or redundant.
ENSEMBLE_UNCERTAINTY_SCORES = ("total", "aleatoric", "epistemic", "msp", "margin")
#: Scores a single classifier can report as `uncertainty`, on its (tempered) logits.
SINGLE_MODEL_UNCERTAINTY_SCORES = ("msp", "entropy", "margin", "max_logit", "energy")


def check_uncertainty_score(score: str, allowed: Sequence[str]) -> str:
    if score not in allowed:
        raise ValueError(f"`uncertainty_score` must be one of {tuple(allowed)}, got {score!r}")
    return score


def logits_uncertainty(logits: torch.Tensor, score: str) -> torch.Tensor:
    """One of `SINGLE_MODEL_UNCERTAINTY_SCORES` from (B, C) logits (higher = less trustworthy)."""
    if score in LOGIT_SCORES:
        return LOGIT_SCORES[score](logits)
    return SCORES[score](logits.softmax(-1))


def ensemble_output(
    member_logits: torch.Tensor, labels: torch.Tensor | None = None, uncertainty_score: str = "total"
) -> UncertaintyClassifierOutput:
    """The output of an ensemble of classifiers from its members' logits.

    Args:
        member_logits: (M, B, C) logits of M members (ensemble members, MC dropout samples) sharing one
            label order.
        labels: (B,) class indices; when given, `loss` is the NLL of the mean probabilities.
        uncertainty_score: one of `ENSEMBLE_UNCERTAINTY_SCORES`.

    Returns:
        [`UncertaintyClassifierOutput`] with `logits` = log of the mean member probabilities (computed as
        `logsumexp_m log_softmax(z_m) - log M`, stable for confident members), `member_logits`, and the
        total / aleatoric / epistemic terms of [`hf_uq.functional.ensemble_uncertainty`].
    """
    if member_logits.ndim != 3:
        raise ValueError(
            f"`member_logits` must have shape (n_members, batch, n_classes), got {tuple(member_logits.shape)}"
        )
    log_probs = member_logits.log_softmax(-1)
    logits = torch.logsumexp(log_probs, dim=0) - math.log(member_logits.shape[0])
    terms = ensemble_uncertainty(log_probs.exp())
    if uncertainty_score in terms:
        uncertainty = terms[uncertainty_score]
    else:
        uncertainty = SCORES[uncertainty_score](logits.exp())
    loss = None
    if labels is not None:
        loss = nn.functional.nll_loss(logits, labels.to(logits.device).view(-1))
    return UncertaintyClassifierOutput(
        loss=loss,
        logits=logits,
        uncertainty=uncertainty,
        member_logits=member_logits,
        total_uncertainty=terms["total"],
        aleatoric_uncertainty=terms["aleatoric"],
        epistemic_uncertainty=terms["epistemic"],
    )
