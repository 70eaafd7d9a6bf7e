"""Training arguments of ensemble (distribution) distillation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from transformers import TrainingArguments

__all__ = ["DISTILLATION_LOSSES", "TEMPERATURE_SCHEDULES", "EnsembleDistillationConfig"]

#: The losses [`EnsembleDistillationTrainer`] can minimize.
DISTILLATION_LOSSES = ("dirichlet_nll", "mean_kl")
#: The shapes of the temperature annealing schedule.
TEMPERATURE_SCHEDULES = ("linear", "cosine", "exponential", "constant")


@dataclass
class EnsembleDistillationConfig(TrainingArguments):
    r"""
    [`~transformers.TrainingArguments`] plus the fields of ensemble distillation, for
    [`EnsembleDistillationTrainer`].

    Ensemble Distribution Distillation (EnD^2, Malinin, Mlodozeniec & Gales, ICLR 2020) fits a Dirichlet student to
    the probabilities of every member of a deep ensemble by maximum likelihood (`"dirichlet_nll"`); classic ensemble
    distillation matches only their mean (`"mean_kl"`). Both are trained with **temperature annealing**: at
    temperature T the members' logits and the student's log-concentrations (for `"mean_kl"`: the student's logits)
    are divided by T before the loss (see [`hf_uq.functional.tempered_dirichlet_nll`]); T starts at
    `initial_temperature` and reaches 1 after `annealing_fraction` of the training steps, then stays at 1. The
    temperature is a function of `state.global_step` alone, so a run resumed from a checkpoint continues the schedule
    exactly where it stopped. Evaluation always uses T = 1.

    Parameters:
        distillation_loss (`str`, *optional*, defaults to `"dirichlet_nll"`):
            `"dirichlet_nll"`: the negative log-likelihood of the teacher members' (tempered, smoothed)
            probabilities under the student's Dirichlet, averaged over members (the student must return `alphas`,
            e.g. [`~hf_uq.DirichletStudentForImageClassification`]). `"mean_kl"`: `T^2 * KL(mean of the members'
            tempered probabilities || softmax(student logits / T))`, classic distillation of the mean prediction
            (any classifier can be the student).
        initial_temperature (`float`, *optional*, defaults to 2.5):
            The temperature T >= 1 at step 0. Tempered members are spread away from the corners of the simplex,
            where the Dirichlet likelihood is hard to optimize.
        temperature_schedule (`str`, *optional*, defaults to `"linear"`):
            How T goes from `initial_temperature` to 1 with the progress p = step / (annealing_fraction *
            max_steps), clipped to [0, 1]: `"linear"` (T = 1 + (T0 - 1)(1 - p)), `"cosine"` (T = 1 + (T0 - 1)(1 +
            cos(pi p)) / 2), `"exponential"` (T = T0^(1 - p), geometric), or `"constant"` (T = T0 throughout: no
            annealing; with T0 = 1, no tempering at all).
        annealing_fraction (`float`, *optional*, defaults to 0.5):
            Fraction of the training steps over which T is annealed to 1, in [0, 1] (0: T = 1 from the start).
        cache_teacher (`bool`, *optional*, defaults to `True`):
            Compute the teacher members' predictions once for every training example before training and look
            them up by example index (the trainer wraps `train_dataset` so that each row carries its index through
            any shuffling, sharding or batching). Set to `False` when the inputs change between epochs (random
            augmentation, mixup in the collator): the teacher then runs on every training batch, on exactly the
            inputs the student sees.
        target_smoothing (`float`, *optional*):
            Central smoothing eps of the teacher members' probabilities for `"dirichlet_nll"`:
            `(1 - eps) * p + eps / C`. Defaults to the student's `config.target_smoothing` (1e-4 for a
            [`~hf_uq.DirichletStudentForImageClassification`]), else 0.
        teacher_batch_size (`int`, *optional*):
            Batch size of the teacher's pass that fills the cache; defaults to `per_device_eval_batch_size`.
        remove_unused_columns (`bool`, *optional*, defaults to `False`):
            As in `TrainingArguments`, but off by default: image datasets usually compute `pixel_values` in a
            transform from an `image` column (e.g. [`~hf_uq.data.with_pixel_values`]), which column removal would
            drop before the transform runs.
    """

    distillation_loss: str = field(
        default="dirichlet_nll",
        metadata={"help": "Distillation loss: 'dirichlet_nll' (distribution distillation) or 'mean_kl'."},
    )
    initial_temperature: float = field(
        default=2.5, metadata={"help": "Temperature T >= 1 at step 0, annealed down to 1."}
    )
    temperature_schedule: str = field(
        default="linear",
        metadata={"help": "Annealing schedule: 'linear', 'cosine', 'exponential' or 'constant'."},
    )
    annealing_fraction: float = field(
        default=0.5, metadata={"help": "Fraction of the training steps over which T reaches 1."}
    )
    cache_teacher: bool = field(
        default=True,
        metadata={"help": "Compute the teacher's predictions once per training example (False for augmentation)."},
    )
    target_smoothing: float | None = field(
        default=None,
        metadata={"help": "Central smoothing eps of the teacher's probabilities; default: the student's config."},
    )
    teacher_batch_size: int | None = field(
        default=None, metadata={"help": "Batch size of the teacher's caching pass (default: eval batch size)."}
    )
    remove_unused_columns: bool = field(
        default=False,
        metadata={"help": "Remove dataset columns the model does not take (off: transforms need their inputs)."},
    )

    def __post_init__(self) -> None:
        if self.distillation_loss not in DISTILLATION_LOSSES:
            raise ValueError(
                f"`distillation_loss` must be one of {DISTILLATION_LOSSES}, got {self.distillation_loss!r}"
            )
        self.initial_temperature = float(self.initial_temperature)
        if not (math.isfinite(self.initial_temperature) and self.initial_temperature >= 1.0):
            raise ValueError(
                f"`initial_temperature` must be finite and >= 1 (annealed down to 1), got {self.initial_temperature}"
            )
        if self.temperature_schedule not in TEMPERATURE_SCHEDULES:
            raise ValueError(
                f"`temperature_schedule` must be one of {TEMPERATURE_SCHEDULES}, got {self.temperature_schedule!r}"
            )
        self.annealing_fraction = float(self.annealing_fraction)
        if not 0.0 <= self.annealing_fraction <= 1.0:
            raise ValueError(f"`annealing_fraction` must be in [0, 1], got {self.annealing_fraction}")
        if self.target_smoothing is not None:
            self.target_smoothing = float(self.target_smoothing)
            if not 0.0 <= self.target_smoothing < 1.0:
                raise ValueError(f"`target_smoothing` must be in [0, 1), got {self.target_smoothing}")
        if self.teacher_batch_size is not None and (
            isinstance(self.teacher_batch_size, bool)
            or not isinstance(self.teacher_batch_size, int)
            or self.teacher_batch_size < 1
        ):
            raise ValueError(f"`teacher_batch_size` must be a positive integer, got {self.teacher_batch_size!r}")
        super().__post_init__()

    def temperature_at(self, step: int, max_steps: int) -> float:
        """The distillation temperature after `step` of `max_steps` optimizer steps (a pure function of both).

        Args:
            step: optimizer steps taken so far (`TrainerState.global_step`).
            max_steps: total optimizer steps of the run (`TrainerState.max_steps`).
        """
        t0 = self.initial_temperature
        if self.temperature_schedule == "constant" or t0 == 1.0:
            return t0
        horizon = self.annealing_fraction * max_steps
        progress = 1.0 if horizon <= 0 else min(1.0, max(0.0, step / horizon))
        if self.temperature_schedule == "linear":
            return 1.0 + (t0 - 1.0) * (1.0 - progress)
        if self.temperature_schedule == "cosine":
            return 1.0 + (t0 - 1.0) * 0.5 * (1.0 + math.cos(math.pi * progress))
        return t0 ** (1.0 - progress)
