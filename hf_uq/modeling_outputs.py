"""The output contract shared by every hf_uq classifier (DESIGN.md §2b)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.modeling_outputs import ImageClassifierOutput


@dataclass
class UncertaintyClassifierOutput(ImageClassifierOutput):
    """
    Output of an hf_uq image classifier: a usable prediction plus its uncertainty.

    Args:
        loss (`torch.Tensor` of shape `()`, *optional*, returned when `labels` is provided):
            The training loss of the model (cross-entropy of `logits` unless the model says otherwise).
        logits (`torch.Tensor` of shape `(batch_size, num_labels)`):
            The usable prediction. For ensembles (deep ensembles, MC dropout, BatchEnsemble) the log of
            the members' mean probabilities, so `logits.softmax(-1)` is the ensemble's prediction.
        uncertainty (`torch.Tensor` of shape `(batch_size,)`):
            The model's default uncertainty score; higher means less trustworthy.
        member_logits (`torch.Tensor` of shape `(num_members, batch_size, num_labels)`, *optional*):
            Per-member logits for ensembles, duos (2 members) and MC dropout samples; else `None`.
        total_uncertainty (`torch.Tensor` of shape `(batch_size,)`, *optional*):
            Predictive entropy in nats, where the model can decompose it; else `None`.
        aleatoric_uncertainty (`torch.Tensor` of shape `(batch_size,)`, *optional*):
            Expected entropy (data uncertainty) in nats; else `None`.
        epistemic_uncertainty (`torch.Tensor` of shape `(batch_size,)`, *optional*):
            Mutual information (model uncertainty) in nats: total minus aleatoric; else `None`.
        alphas (`torch.Tensor` of shape `(batch_size, num_labels)`, *optional*):
            Dirichlet concentrations (Dirichlet students); else `None`.
        hidden_states, attentions:
            As in [`~transformers.modeling_outputs.ImageClassifierOutput`], when the model exposes them.
    """

    uncertainty: torch.Tensor | None = None
    member_logits: torch.Tensor | None = None
    total_uncertainty: torch.Tensor | None = None
    aleatoric_uncertainty: torch.Tensor | None = None
    epistemic_uncertainty: torch.Tensor | None = None
    alphas: torch.Tensor | None = None
