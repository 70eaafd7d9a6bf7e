"""Ensemble distillation with `transformers.Trainer`: a deep ensemble (the teacher) into a single student.

The default recipe is Ensemble Distribution Distillation (EnD^2, Malinin, Mlodozeniec & Gales, ICLR 2020): a
[`~hf_uq.DirichletStudentForImageClassification`] learns a Dirichlet over class probabilities by maximizing the
likelihood of every teacher member's prediction, so one forward pass yields the ensemble's mean prediction *and*
its total / aleatoric / epistemic uncertainty. Classic distillation of the ensemble's mean prediction is available
as a baseline (`distillation_loss="mean_kl"`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from scipy.special import softmax
from torch import nn
from transformers import EvalPrediction, PreTrainedModel, Trainer, TrainingArguments

from ..functional.classification import accuracy, ece, nll
from ..functional.decomposition import dirichlet_uncertainty, ensemble_uncertainty
from ..functional.dirichlet import mean_distillation_kl, tempered_dirichlet_nll
from ..functional.fidelity import fidelity
from ..functional.scores import entropy
from ..models.deep_ensemble import DeepEnsembleForImageClassification
from ..models.member_utils import id2label_of, label_order
from .ensemble_distillation_config import EnsembleDistillationConfig

__all__ = ["EnsembleDistillationTrainer", "distillation_metrics"]

#: Column carrying each training row's position in the training set (the key of the teacher cache).
INDEX_COLUMN = "example_index"
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


class _IndexedDataset(torch.utils.data.Dataset):
    """A map-style dataset whose rows also carry their own index, so that cached teacher predictions can be looked
    up whatever order (shuffling), shard (distributed training) or batch a row ends up in."""

    def __init__(self, dataset: Any):
        if isinstance(dataset, _IndexedDataset):
            dataset = dataset.dataset
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def _with_index(self, row: Any, index: int) -> dict[str, Any]:
        if not isinstance(row, Mapping):
            raise ValueError(
                f"training rows must be mappings of model inputs (e.g. {{'pixel_values': ...}}), got "
                f"{type(row).__name__}"
            )
        return {**row, INDEX_COLUMN: int(index)}

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self._with_index(self.dataset[index], index)

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        # batched fetch (one transform call per batch for a `datasets.Dataset` with a transform)
        getitems = getattr(self.dataset, "__getitems__", None)
        rows = getitems(list(indices)) if getitems is not None else [self.dataset[i] for i in indices]
        return [self._with_index(row, i) for row, i in zip(rows, indices, strict=True)]


def distillation_metrics(prediction: EvalPrediction) -> dict[str, float]:
    """The default `compute_metrics` of [`EnsembleDistillationTrainer`], all from [`hf_uq.functional`].

    On the labelled rows (label >= 0): the student's `accuracy`, `nll` and `ece` (of its mean prediction) and the
    teacher's `teacher_accuracy`, `teacher_nll`. On every row (unlabelled ones included, e.g. OOD inputs mixed into
    the evaluation set): `fidelity`, the Spearman correlation between the student's epistemic uncertainty and the
    teacher's mutual information (below 0.7 the ensemble's diversity is considered lost), and `fidelity_total`, the
    same for the total uncertainties. A student without `alphas` (e.g. a mean-distilled classifier) has no epistemic
    term; its `fidelity_total` compares the entropies of the mean predictions.

    Args:
        prediction: `predictions` = (student logits, [student alphas,] teacher member log-probabilities of shape
            (N, M, C)), as returned by [`EnsembleDistillationTrainer.prediction_step`]; `label_ids` (N,) with -100 on
            unlabelled rows.
    """
    parts = prediction.predictions
    logits, alphas, teacher = (parts[0], parts[1], parts[2]) if len(parts) == 3 else (parts[0], None, parts[1])
    logits = np.asarray(logits, dtype=np.float64)
    teacher_probs = softmax(np.asarray(teacher, dtype=np.float64), axis=-1).transpose(1, 0, 2)  # (M, N, C)
    teacher_mean = teacher_probs.mean(0)
    labels = np.asarray(prediction.label_ids).reshape(-1)
    metrics: dict[str, float] = {}
    keep = labels >= 0
    if keep.any():
        metrics.update(
            accuracy=accuracy(logits[keep], labels[keep], from_logits=True),
            nll=nll(logits[keep], labels[keep], from_logits=True),
            ece=ece(logits[keep], labels[keep], from_logits=True),
            teacher_accuracy=accuracy(teacher_mean[keep], labels[keep]),
            teacher_nll=nll(teacher_mean[keep], labels[keep]),
        )
    teacher_terms = ensemble_uncertainty(teacher_probs)
    if alphas is not None:
        student_terms = dirichlet_uncertainty(np.asarray(alphas, dtype=np.float64))
        metrics["fidelity"] = fidelity(student_terms["epistemic"], teacher_terms["epistemic"])
        student_total = student_terms["total"]
    else:
        student_total = entropy(softmax(logits, axis=-1))
    metrics["fidelity_total"] = fidelity(student_total, teacher_terms["total"])
    return metrics


class EnsembleDistillationTrainer(Trainer):
    r"""
    [`~transformers.Trainer`] that distills a deep ensemble (the teacher) into a single student.

    With `args.distillation_loss="dirichlet_nll"` (default) the student, e.g. a
    [`~hf_uq.DirichletStudentForImageClassification`], is trained by Ensemble Distribution Distillation: the loss of
    an example is the negative log-likelihood of the M teacher members' probabilities under the student's Dirichlet
    ([`dirichlet_nll_loss`]), with temperature annealing and central smoothing (see [`EnsembleDistillationConfig`]).
    With `"mean_kl"` it is classic distillation of the ensemble's mean prediction ([`mean_kl_loss`]).

    The teacher is frozen (`requires_grad_(False)`, eval mode) and never updated; labels in the dataset are not used
    by the loss (only by the metrics). By default the teacher's member predictions are computed once for every
    training example, before training, and looked up by example index (`args.cache_teacher`); without the cache the
    teacher runs on every training batch. Evaluation runs the teacher on the evaluation batches and reports, by
    default, the metrics of [`distillation_metrics`] (accuracy, NLL, ECE and the fidelity of the student's
    epistemic uncertainty to the teacher's mutual information); the evaluation loss is the distillation loss at
    T = 1.

    Everything else is `Trainer`: evaluation during training, checkpoints and `resume_from_checkpoint` (the
    temperature is a function of the global step, so it resumes exactly; pass the same teacher again), gradient
    accumulation (the loss is a sum over examples divided by the number of examples in the accumulated batch, across
    processes, so accumulation and data parallelism give the large-batch gradient) and `accelerate launch`.

    Args:
        model (`PreTrainedModel`):
            The student. For `"dirichlet_nll"` its output must carry `alphas`.
        teacher (`DeepEnsembleForImageClassification` or a sequence of models):
            The ensemble to distill: any module whose output carries `member_logits` (M, B, C) (hf_uq deep
            ensembles, BatchEnsembles, ...), or a list of image classifiers, combined with
            [`~hf_uq.DeepEnsembleForImageClassification.from_members`]. It must share the student's label space
            (same names, same order), else `ValueError`. It takes the same `pixel_values` as the student.
        args ([`EnsembleDistillationConfig`] or `TrainingArguments`, *optional*):
            A plain `TrainingArguments` is copied into an `EnsembleDistillationConfig` with the distillation
            defaults; the object passed in is never modified.
        train_dataset (map-style dataset):
            Rows with `pixel_values` (labels optional: unlabelled inputs are as useful as labelled ones). Must have a
            length when `cache_teacher` is set.
        data_collator, eval_dataset, processing_class, model_init, callbacks, optimizers, optimizer_cls_and_kwargs,
        preprocess_logits_for_metrics:
            As in [`~transformers.Trainer`].
        compute_metrics (`Callable[[EvalPrediction], dict]`, *optional*):
            Defaults to [`distillation_metrics`]; receives the predictions described there.

    Example:

    ```python
    >>> from hf_uq import DirichletStudentForImageClassification
    >>> from hf_uq.trainer import EnsembleDistillationConfig, EnsembleDistillationTrainer
    >>> student = DirichletStudentForImageClassification.from_backbone(members[0])  # doctest: +SKIP
    >>> trainer = EnsembleDistillationTrainer(  # doctest: +SKIP
    ...     model=student, teacher=members, args=EnsembleDistillationConfig(output_dir="out"), train_dataset=data
    ... )
    >>> trainer.train()  # doctest: +SKIP
    ```
    """

    # compute_loss divides a sum over examples by `num_items_in_batch` (see `get_batch_samples`)
    loss_is_scaled_for_ga = True

    def __init__(
        self,
        model: PreTrainedModel | nn.Module | None = None,
        teacher: nn.Module | Sequence[PreTrainedModel] | None = None,
        args: EnsembleDistillationConfig | TrainingArguments | None = None,
        data_collator: Callable | None = None,
        train_dataset: Any | None = None,
        eval_dataset: Any | None = None,
        processing_class: Any | None = None,
        model_init: Callable[..., PreTrainedModel] | None = None,
        compute_metrics: Callable[[EvalPrediction], dict] | None = None,
        callbacks: list | None = None,
        optimizers: tuple = (None, None),
        optimizer_cls_and_kwargs: tuple | None = None,
        preprocess_logits_for_metrics: Callable | None = None,
    ):
        args = self._distillation_args(args)
        self.teacher = self._frozen_teacher(teacher)
        if train_dataset is not None and args.cache_teacher:
            if isinstance(train_dataset, torch.utils.data.IterableDataset) or not hasattr(train_dataset, "__len__"):
                raise ValueError(
                    "`cache_teacher=True` needs a map-style `train_dataset` with a length (the cache is keyed by "
                    "example index); pass `cache_teacher=False` for iterable datasets"
                )
            train_dataset = _IndexedDataset(train_dataset)
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            model_init=model_init,
            compute_metrics=distillation_metrics if compute_metrics is None else compute_metrics,
            callbacks=callbacks,
            optimizers=optimizers,
            optimizer_cls_and_kwargs=optimizer_cls_and_kwargs,
            preprocess_logits_for_metrics=preprocess_logits_for_metrics,
        )
        self._check_label_spaces(self.model, self.teacher)
        self.teacher.to(self.args.device)
        self._teacher_cache: torch.Tensor | None = None

    # ------------------------------------------------------------------------------------------ setup

    @staticmethod
    def _distillation_args(args: TrainingArguments | None) -> EnsembleDistillationConfig:
        if args is None:
            return EnsembleDistillationConfig()
        if isinstance(args, EnsembleDistillationConfig):
            return args
        if not isinstance(args, TrainingArguments):
            raise TypeError(f"`args` must be an EnsembleDistillationConfig or TrainingArguments, got {type(args)}")
        # a new object: the caller's arguments are never modified
        values = {name: getattr(args, name) for name in args.__dataclass_fields__ if args.__dataclass_fields__[name].init}
        return EnsembleDistillationConfig(**values)

    @staticmethod
    def _frozen_teacher(teacher: Any) -> nn.Module:
        if teacher is None:
            raise ValueError("`teacher` is required: a DeepEnsembleForImageClassification or a list of models")
        if isinstance(teacher, Sequence) and not isinstance(teacher, (str, nn.Module)):
            teacher = DeepEnsembleForImageClassification.from_members(list(teacher))
        if not isinstance(teacher, nn.Module):
            raise TypeError(f"`teacher` must be a torch module or a list of models, got {type(teacher).__name__}")
        teacher.eval()
        teacher.requires_grad_(False)
        return teacher

    @staticmethod
    def _check_label_spaces(student: nn.Module, teacher: nn.Module) -> None:
        configs = [getattr(m, "config", None) for m in (student, teacher)]
        if any(c is None or not getattr(c, "id2label", None) for c in configs):
            raise ValueError("the student and the teacher must both have a `config.id2label` to compare label spaces")
        label_order(id2label_of(configs[0]), id2label_of(configs[1]), ("the student", "the teacher"), align=False)

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        if INDEX_COLUMN not in self._signature_columns:
            self._signature_columns.append(INDEX_COLUMN)  # keep the cache key through column removal

    # ------------------------------------------------------------------------------------------ teacher

    @property
    def target_smoothing(self) -> float:
        """Central smoothing of the teacher's probabilities: `args.target_smoothing`, else the student's config."""
        if self.args.target_smoothing is not None:
            return self.args.target_smoothing
        config = getattr(self.accelerator.unwrap_model(self.model), "config", None)
        return float(getattr(config, "target_smoothing", 0.0) or 0.0)

    @property
    def temperature(self) -> float:
        """The current distillation temperature, a function of `state.global_step` and `state.max_steps`."""
        return self.args.temperature_at(self.state.global_step, self.state.max_steps or 0)

    @torch.no_grad()
    def teacher_member_logits(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """The frozen teacher's (M, B, C) member log-probabilities for a batch (eval mode, no gradient)."""
        self.teacher.eval()
        output = self.teacher(pixel_values=pixel_values.to(self.args.device))
        member_logits = getattr(output, "member_logits", None)
        if member_logits is None:
            raise ValueError(
                f"the teacher ({type(self.teacher).__name__}) returned no `member_logits`: pass a deep ensemble or a "
                "list of models"
            )
        return member_logits.float().log_softmax(-1)

    @torch.no_grad()
    def build_teacher_cache(self) -> torch.Tensor:
        """Compute the teacher's member log-probabilities for every training example, in index order.

        Returns the (N, M, C) float32 CPU tensor that training looks rows up in (also kept as the cache). Rows are
        fetched and collated in order, without a DataLoader, so no random state is consumed.
        """
        if self.train_dataset is None:
            raise ValueError("no `train_dataset` to cache the teacher's predictions for")
        dataset = self.train_dataset.dataset if isinstance(self.train_dataset, _IndexedDataset) else self.train_dataset
        batch_size = self.args.teacher_batch_size or self.args.per_device_eval_batch_size
        parts = []
        for start in range(0, len(dataset), batch_size):
            indices = list(range(start, min(len(dataset), start + batch_size)))
            getitems = getattr(dataset, "__getitems__", None)
            rows = getitems(indices) if getitems is not None else [dataset[i] for i in indices]
            batch = self.data_collator([{"pixel_values": row["pixel_values"]} for row in rows])
            parts.append(self.teacher_member_logits(batch["pixel_values"]).transpose(0, 1).cpu())
        self._teacher_cache = torch.cat(parts)
        return self._teacher_cache

    def _teacher_logits_for(self, inputs: Mapping[str, Any]) -> torch.Tensor:
        index = inputs.get(INDEX_COLUMN)
        if not self.args.cache_teacher or index is None:
            return self.teacher_member_logits(inputs["pixel_values"])
        if self._teacher_cache is None or len(self._teacher_cache) != len(self.train_dataset):
            self.build_teacher_cache()
        rows = self._teacher_cache[torch.as_tensor(index).cpu().long()]
        return rows.transpose(0, 1).to(inputs["pixel_values"].device)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any):
        """[`~transformers.Trainer.train`], after filling the teacher cache (when `args.cache_teacher`)."""
        if self.args.cache_teacher and self.train_dataset is not None:
            self.build_teacher_cache()
        return super().train(resume_from_checkpoint, *args, **kwargs)

    # ------------------------------------------------------------------------------------------ losses

    @staticmethod
    def dirichlet_nll_loss(
        student_log_alphas: torch.Tensor,
        teacher_logits: torch.Tensor,
        temperature: float = 1.0,
        smoothing: float = 0.0,
        reduction: str = "mean",
    ) -> torch.Tensor:
        """EnD^2: NLL of the teacher members' probabilities under the student's Dirichlet, tempered and smoothed.

        `alpha = exp(student_log_alphas / T)`, `pi_m = (1 - eps) softmax(teacher_logits_m / T) + eps / C`,
        `loss = -(1/M) sum_m log Dir(pi_m | alpha)` per example ([`hf_uq.functional.tempered_dirichlet_nll`]).

        Args:
            student_log_alphas: (B, C) log-concentrations of the student (`outputs.alphas.log()`).
            teacher_logits: (M, B, C) logits or log-probabilities of the M members (no gradient flows into them).
            temperature: T >= 1 during annealing, 1 at the end.
            smoothing: central smoothing eps in [0, 1).
            reduction: `"mean"`, `"sum"` or `"none"` (per example).
        """
        return tempered_dirichlet_nll(
            student_log_alphas, teacher_logits, temperature=temperature, smoothing=smoothing, reduction=reduction
        )

    @staticmethod
    def mean_kl_loss(
        student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0, reduction: str = "mean"
    ) -> torch.Tensor:
        """Classic distillation: `T^2 * KL(mean_m softmax(teacher_logits_m / T) || softmax(student_logits / T))`
        ([`hf_uq.functional.mean_distillation_kl`]).

        Args:
            student_logits: (B, C) logits of the student.
            teacher_logits: (M, B, C) logits or log-probabilities of the M members.
            temperature: T > 0.
            reduction: `"mean"`, `"sum"` or `"none"` (per example).
        """
        return mean_distillation_kl(student_logits, teacher_logits, temperature=temperature, reduction=reduction)

    def _per_example_loss(self, outputs: Any, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
        if self.args.distillation_loss == "mean_kl":
            return self.mean_kl_loss(outputs["logits"], teacher_logits, temperature, reduction="none")
        alphas = outputs.get("alphas") if isinstance(outputs, Mapping) else None
        if alphas is None:
            raise ValueError(
                "`distillation_loss='dirichlet_nll'` needs a student whose output has `alphas` (e.g. "
                "DirichletStudentForImageClassification); use `distillation_loss='mean_kl'` for a plain classifier"
            )
        return self.dirichlet_nll_loss(
            alphas.log(), teacher_logits, temperature, self.target_smoothing, reduction="none"
        )

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: torch.device) -> tuple[list, Any]:
        """Fetch the micro-batches of one optimizer step and count their examples (across processes when
        `average_tokens_across_devices`): `compute_loss` divides its sum over examples by that count."""
        batch_samples = []
        for _ in range(num_batches):
            try:
                batch_samples.append(next(epoch_iterator))
            except StopIteration:
                break
        count = torch.tensor(sum(len(batch["pixel_values"]) for batch in batch_samples), device=device)
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            count = self.accelerator.gather(count).sum()
        return batch_samples, count

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        """The distillation loss of a batch at the current temperature.

        A sum over examples divided by `num_items_in_batch` (the examples of the whole accumulated batch, on every
        process; multiplied by the number of processes, which data parallelism averages over), so gradient
        accumulation and data parallelism reproduce the large-batch gradient. Without `num_items_in_batch` (a
        direct call) it is the batch mean.
        """
        inputs = dict(inputs)
        teacher_logits = self._teacher_logits_for(inputs)
        inputs.pop(INDEX_COLUMN, None)
        inputs.pop("labels", None)  # the teacher gives the targets
        outputs = model(**inputs)
        per_example = self._per_example_loss(outputs, teacher_logits, self.temperature)
        if num_items_in_batch is None:
            loss = per_example.mean()
        else:
            loss = per_example.sum() / num_items_in_batch
            if self.args.average_tokens_across_devices and self.args.world_size > 1:
                loss = loss * self.accelerator.num_processes
        return (loss, outputs) if return_outputs else loss

    # ------------------------------------------------------------------------------------------ evaluation

    def prediction_step(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
    ) -> tuple[torch.Tensor | None, tuple[torch.Tensor, ...] | None, torch.Tensor | None]:
        """Student and teacher on one evaluation batch.

        Returns the distillation loss at T = 1 (batch mean), the predictions `(student logits, student alphas,
        teacher member log-probabilities (B, M, C))` (without alphas for a student that has none) and the labels
        (-100 where a row has none, so that unlabelled evaluation rows still count for fidelity).
        """
        inputs = dict(self._prepare_inputs(inputs))
        inputs.pop(INDEX_COLUMN, None)
        labels = inputs.pop("labels", None)
        with torch.no_grad():
            outputs = model(**inputs)
            teacher_logits = self.teacher_member_logits(inputs["pixel_values"])
            loss = self._per_example_loss(outputs, teacher_logits, 1.0).mean().detach().float()
        if prediction_loss_only:
            return loss, None, None
        logits = outputs["logits"].detach().float()
        if labels is None:
            labels = torch.full((len(logits),), -100, dtype=torch.long, device=logits.device)
        alphas = outputs.get("alphas") if isinstance(outputs, Mapping) else None
        teacher = teacher_logits.transpose(0, 1).contiguous()
        predictions = (logits, teacher) if alphas is None else (logits, alphas.detach().float(), teacher)
        return loss, predictions, labels

    # ------------------------------------------------------------------------------------------ checkpoints

    def _reload_weights(self, checkpoint: str, model: nn.Module | None = None) -> bool:
        """Load a checkpoint's weights through `from_pretrained` (True) when `Trainer`'s raw `load_state_dict`
        would miss them; False to let `Trainer` load it.

        transformers 5 saves some models (ViT among them) under their legacy parameter names and renames them only
        inside `from_pretrained`; `Trainer._load_from_checkpoint` loads the file with a plain, non-strict
        `load_state_dict`, so such weights are silently skipped and a resumed run continues from its
        initialization. A fresh `from_pretrained` of the checkpoint (same class, same config) converts the names;
        its state dict is then copied in strictly.
        """
        model = self.accelerator.unwrap_model(self.model if model is None else model)
        if (
            self.is_deepspeed_enabled
            or self.is_fsdp_enabled
            or not isinstance(model, PreTrainedModel)
            or not os.path.isfile(os.path.join(checkpoint, "config.json"))
            or not any(os.path.isfile(os.path.join(checkpoint, name)) for name in _WEIGHT_FILES)
        ):
            return False
        loaded = type(model).from_pretrained(checkpoint, config=copy.deepcopy(model.config), dtype=model.dtype)
        model.load_state_dict(loaded.state_dict(), strict=True)
        return True

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
        if not self._reload_weights(resume_from_checkpoint, model):
            super()._load_from_checkpoint(resume_from_checkpoint, model)

    def _load_best_model(self) -> None:
        best = self.state.best_model_checkpoint
        if best is None or not self._reload_weights(best):
            super()._load_best_model()

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Adds the distillation temperature to the training logs."""
        if "loss" in logs:
            logs = {**logs, "temperature": self.temperature}
        super().log(logs, start_time)
