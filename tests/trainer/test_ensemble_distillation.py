"""EnsembleDistillationTrainer and EnsembleDistillationConfig: losses, teacher cache, Trainer features."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from transformers import TrainingArguments

import hf_uq.models.auto  # noqa: F401  (registers the Auto classes)
from hf_uq.functional.dirichlet import mean_distillation_kl, tempered_dirichlet_nll
from hf_uq.models.deep_ensemble import DeepEnsembleForImageClassification
from hf_uq.models.dirichlet_student import DirichletStudent
from hf_uq.models.tiny import tiny_vit
from hf_uq.trainer import (
    EnsembleDistillationConfig,
    EnsembleDistillationTrainer,
    distillation_metrics,
)

REPO = Path(__file__).resolve().parents[2]
LABELS = {i: f"class_{i}" for i in range(4)}
TINY = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32}


pytestmark = pytest.mark.usefixtures("one_thread")


def _vit(seed: int, **kwargs):
    model = tiny_vit(num_labels=len(kwargs.get("id2label", LABELS)), id2label=kwargs.pop("id2label", LABELS),
                     seed=seed, **TINY, **kwargs).eval()
    with torch.no_grad():  # a few nats of logit spread, so that the members disagree visibly
        model.classifier.weight.mul_(30)
    return model


@pytest.fixture(scope="module")
def members():
    return [_vit(seed) for seed in range(3)]


@pytest.fixture(scope="module")
def rows():
    generator = torch.Generator().manual_seed(0)
    pixels = torch.randn(32, 3, 16, 16, generator=generator)
    labels = torch.randint(0, 4, (32,), generator=generator)
    labels[::4] = -100  # unlabelled rows distill just as well
    return [{"pixel_values": pixels[i], "labels": labels[i]} for i in range(32)]


def _student(seed: int = 7, dropout: float = 0.1):
    return DirichletStudent.from_backbone(
        tiny_vit(num_labels=4, id2label=LABELS, seed=seed, hidden_dropout_prob=dropout, **TINY)
    )


def _args(output_dir, **kwargs) -> EnsembleDistillationConfig:
    defaults = dict(output_dir=str(output_dir), per_device_train_batch_size=8, per_device_eval_batch_size=16,
                    max_steps=6, learning_rate=1e-2, seed=0, use_cpu=True, report_to="none", disable_tqdm=True,
                    save_strategy="no", logging_steps=1, initial_temperature=3.0)
    return EnsembleDistillationConfig(**{**defaults, **kwargs})


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ------------------------------------------------------------------------------------------ config


def test_temperature_schedules():
    config = EnsembleDistillationConfig(initial_temperature=4.0, annealing_fraction=0.5)
    assert config.temperature_at(0, 100) == 4.0
    assert config.temperature_at(25, 100) == pytest.approx(2.5)
    assert config.temperature_at(50, 100) == 1.0 and config.temperature_at(99, 100) == 1.0
    cosine = dataclasses.replace(config, temperature_schedule="cosine")
    assert cosine.temperature_at(25, 100) == pytest.approx(2.5) and cosine.temperature_at(10, 100) > 3.0
    exponential = dataclasses.replace(config, temperature_schedule="exponential")
    assert exponential.temperature_at(25, 100) == pytest.approx(2.0)  # geometric midpoint of 4 and 1
    assert dataclasses.replace(config, temperature_schedule="constant").temperature_at(80, 100) == 4.0
    assert dataclasses.replace(config, annealing_fraction=0.0).temperature_at(0, 100) == 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"distillation_loss": "kl"}, "distillation_loss"),
        ({"initial_temperature": 0.5}, "initial_temperature"),
        ({"temperature_schedule": "step"}, "temperature_schedule"),
        ({"annealing_fraction": 1.5}, "annealing_fraction"),
        ({"target_smoothing": 1.0}, "target_smoothing"),
        ({"teacher_batch_size": 0}, "teacher_batch_size"),
    ],
)
def test_invalid_config_raises(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EnsembleDistillationConfig(**kwargs)


# ------------------------------------------------------------------------------------------ setup


def test_plain_training_arguments_are_copied(members, rows, tmp_path):
    plain = TrainingArguments(output_dir=str(tmp_path), learning_rate=1e-3, use_cpu=True, report_to="none")
    before = plain.to_dict()
    trainer = EnsembleDistillationTrainer(model=_student(), teacher=members, args=plain, train_dataset=rows)
    assert isinstance(trainer.args, EnsembleDistillationConfig) and trainer.args is not plain
    assert trainer.args.learning_rate == 1e-3 and trainer.args.distillation_loss == "dirichlet_nll"
    assert plain.to_dict() == before


def test_teacher_list_is_wrapped_and_frozen(members, rows, tmp_path):
    trainer = EnsembleDistillationTrainer(model=_student(), teacher=members, args=_args(tmp_path), train_dataset=rows)
    assert isinstance(trainer.teacher, DeepEnsembleForImageClassification)
    assert not trainer.teacher.training
    assert not any(p.requires_grad for p in trainer.teacher.parameters())


@pytest.mark.parametrize("change", ["names", "count", "order"])
def test_teacher_with_another_label_space_raises(rows, tmp_path, change):
    other = {"names": {i: f"other_{i}" for i in range(4)}, "count": {i: f"class_{i}" for i in range(5)},
             "order": {0: "class_1", 1: "class_0", 2: "class_2", 3: "class_3"}}[change]
    teacher = [_vit(0, id2label=other), _vit(1, id2label=other)]
    with pytest.raises(ValueError, match="label"):
        EnsembleDistillationTrainer(model=_student(), teacher=teacher, args=_args(tmp_path), train_dataset=rows)


def test_iterable_dataset_needs_cache_off(members, tmp_path):
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield {"pixel_values": torch.zeros(3, 16, 16)}

    with pytest.raises(ValueError, match="cache_teacher"):
        EnsembleDistillationTrainer(model=_student(), teacher=members, args=_args(tmp_path), train_dataset=Stream())
    EnsembleDistillationTrainer(model=_student(), teacher=members, args=_args(tmp_path, cache_teacher=False),
                                train_dataset=Stream())


# ------------------------------------------------------------------------------------------ losses


def test_static_losses_are_the_functional_ones():
    generator = torch.Generator().manual_seed(0)
    z, teacher = torch.randn(5, 4, generator=generator), 3 * torch.randn(3, 5, 4, generator=generator)
    loss = EnsembleDistillationTrainer.dirichlet_nll_loss(z, teacher, temperature=2.0, smoothing=0.01)
    assert torch.equal(loss, tempered_dirichlet_nll(z, teacher, temperature=2.0, smoothing=0.01))
    kl = EnsembleDistillationTrainer.mean_kl_loss(z, teacher, temperature=2.0, reduction="none")
    assert torch.equal(kl, mean_distillation_kl(z, teacher, temperature=2.0, reduction="none"))


def test_cache_is_keyed_by_example_index(members, rows, tmp_path):
    trainer = EnsembleDistillationTrainer(model=_student(), teacher=members, args=_args(tmp_path), train_dataset=rows)
    cache = trainer.build_teacher_cache()
    assert cache.shape == (32, 3, 4)
    batch = next(iter(trainer.get_train_dataloader()))  # shuffled
    assert not torch.equal(batch["example_index"], torch.arange(8))
    looked_up = trainer._teacher_logits_for(batch)
    torch.testing.assert_close(looked_up, trainer.teacher_member_logits(batch["pixel_values"]))
    # the cached loss equals the loss with the teacher run on the batch itself
    student = trainer.model.eval()
    no_cache = EnsembleDistillationTrainer(model=student, teacher=members, args=_args(tmp_path, cache_teacher=False),
                                           train_dataset=rows)
    with torch.no_grad():
        torch.testing.assert_close(trainer.compute_loss(student, batch), no_cache.compute_loss(student, batch))


def test_datasets_with_a_transform(members, rows, tmp_path):
    """A `datasets.Dataset` whose transform makes `pixel_values` (fetched in batches through `__getitems__`)."""
    from datasets import Dataset

    pixels = torch.stack([row["pixel_values"] for row in rows])
    data = Dataset.from_dict({"raw": pixels.numpy().tolist()}).with_transform(
        lambda batch: {"pixel_values": torch.tensor(batch["raw"]) * 2.0}
    )
    trainer = EnsembleDistillationTrainer(model=_student(), teacher=members, args=_args(tmp_path, max_steps=2),
                                          train_dataset=data, eval_dataset=data)
    trainer.train()
    torch.testing.assert_close(trainer._teacher_cache.transpose(0, 1), trainer.teacher_member_logits(pixels * 2.0))
    assert math.isfinite(trainer.evaluate()["eval_fidelity"])


# ------------------------------------------------------------------------------------------ training


def test_training_leaves_the_teacher_and_args_alone(members, rows, tmp_path):
    teacher = DeepEnsembleForImageClassification.from_members(members)
    weights, student = _state(teacher), _student()
    start = _state(student)
    args = _args(tmp_path, eval_strategy="steps", eval_steps=6)
    before = args.to_dict()
    trainer = EnsembleDistillationTrainer(model=student, teacher=teacher, args=args, train_dataset=rows,
                                          eval_dataset=rows[:16])
    trainer.train()
    assert all(torch.equal(v, weights[k]) for k, v in teacher.state_dict().items())
    assert any(not torch.equal(v, start[k]) for k, v in student.state_dict().items())
    assert args.to_dict() == before
    logs = [log for log in trainer.state.log_history if "loss" in log]
    temperatures = [log["temperature"] for log in logs]
    assert temperatures[0] > 2.0 and temperatures[-1] == 1.0 and temperatures == sorted(temperatures, reverse=True)
    assert all(math.isfinite(log["loss"]) for log in logs)
    metrics = next(log for log in trainer.state.log_history if "eval_fidelity" in log)
    for key in ("eval_loss", "eval_accuracy", "eval_nll", "eval_ece", "eval_fidelity", "eval_teacher_accuracy"):
        assert math.isfinite(metrics[key]), key


def test_resume_ends_at_the_uninterrupted_weights(members, rows, tmp_path):
    args = _args(tmp_path, save_strategy="steps", save_steps=3, per_device_train_batch_size=12)  # resumes mid-epoch
    full = _student()
    EnsembleDistillationTrainer(model=full, teacher=members, args=args, train_dataset=rows).train()
    resumed = _student()
    trainer = EnsembleDistillationTrainer(model=resumed, teacher=members, args=args, train_dataset=rows)
    trainer.train(resume_from_checkpoint=os.path.join(tmp_path, "checkpoint-3"))
    assert trainer.state.global_step == 6 and trainer.temperature == 1.0
    for key, value in full.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key


def test_gradient_accumulation_matches_the_large_batch(members, rows, tmp_path):
    trained = {}
    for batch, steps in ((16, 1), (8, 2)):
        student = _student(dropout=0.0)
        args = _args(tmp_path / f"{batch}", per_device_train_batch_size=batch, gradient_accumulation_steps=steps,
                     max_steps=3)
        EnsembleDistillationTrainer(model=student, teacher=members, args=args, train_dataset=rows).train()
        trained[batch] = _state(student)
    for key, value in trained[16].items():
        torch.testing.assert_close(value, trained[8][key], rtol=1e-4, atol=1e-5)


def test_mean_kl_trains_a_plain_classifier(members, rows, tmp_path):
    student = tiny_vit(num_labels=4, id2label=LABELS, seed=3, **TINY)
    trainer = EnsembleDistillationTrainer(model=student, teacher=members, args=_args(
        tmp_path, distillation_loss="mean_kl", max_steps=2, eval_strategy="steps", eval_steps=2),
        train_dataset=rows, eval_dataset=rows[:8])
    trainer.train()
    metrics = trainer.evaluate()
    assert math.isfinite(metrics["eval_fidelity_total"]) and "eval_fidelity" not in metrics
    with pytest.raises(ValueError, match="alphas"):
        EnsembleDistillationTrainer(model=student, teacher=members, args=_args(tmp_path, max_steps=1),
                                    train_dataset=rows).train()


def test_distillation_metrics_on_unlabelled_rows():
    generator = torch.Generator().manual_seed(0)
    teacher = (3 * torch.randn(10, 3, 4, generator=generator)).log_softmax(-1).numpy()
    logits, alphas = torch.randn(10, 4, generator=generator), torch.rand(10, 4, generator=generator) + 0.5
    prediction = type("P", (), {"predictions": (logits.numpy(), alphas.numpy(), teacher),
                                "label_ids": torch.full((10,), -100).numpy()})()
    metrics = distillation_metrics(prediction)
    assert set(metrics) == {"fidelity", "fidelity_total"}


# ------------------------------------------------------------------------------------------ accelerate

SCRIPT = """
import sys, torch
import hf_uq.models.auto
from accelerate import PartialState
from hf_uq.models.dirichlet_student import DirichletStudent
from hf_uq.models.tiny import tiny_vit
from hf_uq.trainer import EnsembleDistillationConfig, EnsembleDistillationTrainer

torch.set_num_threads(1)
labels = {i: str(i) for i in range(4)}
tiny = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, hidden_dropout_prob=0.0)
members = [tiny_vit(num_labels=4, id2label=labels, seed=s, **tiny) for s in range(2)]
pixels = torch.randn(32, 3, 16, 16, generator=torch.Generator().manual_seed(0))
rows = [{"pixel_values": pixels[i]} for i in range(32)]
student = DirichletStudent.from_backbone(tiny_vit(num_labels=4, id2label=labels, seed=9, **tiny))
args = EnsembleDistillationConfig(
    output_dir=sys.argv[1], per_device_train_batch_size=int(sys.argv[2]), max_steps=4, learning_rate=1e-2,
    use_cpu=True, report_to="none", disable_tqdm=True, save_strategy="no", per_device_eval_batch_size=8,
)
trainer = EnsembleDistillationTrainer(model=student, teacher=members, args=args, train_dataset=rows,
                                      eval_dataset=rows[:16])
result = trainer.train()
metrics = trainer.evaluate()
state = PartialState()
weights = torch.cat([p.detach().flatten() for p in student.parameters()])
torch.save(weights, f"{sys.argv[1]}/weights_{state.process_index}_of_{state.num_processes}.pt")
# one file per rank: two processes printing to one pipe can glue their lines together
with open(f"{sys.argv[1]}/report_{state.process_index}.txt", "w") as report:
    report.write(f"rank {state.process_index}/{state.num_processes} steps {result.global_step} "
                 f"fidelity {metrics['eval_fidelity']:.6f}")
"""


# ~25 s on an idle 2-core machine (two interpreters importing torch and transformers, then one more); up to ~90 s
# when other jobs share the cores
def test_accelerate_launch_two_processes(tmp_path):
    """Data parallelism on CPU: `accelerate launch --multi_gpu --num_processes 2` on a machine without GPUs runs two
    CPU processes (gloo); `--cpu` alone starts a single process (accelerate needs an MPI hostfile for more)."""
    script = tmp_path / "distill.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    (tmp_path / "ddp").mkdir()
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", str(script),
               str(tmp_path / "ddp"), "4"]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    elapsed = time.perf_counter() - start
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    lines = sorted(report.read_text() for report in (tmp_path / "ddp").glob("report_*.txt"))
    assert [line.split()[1] for line in lines] == ["0/2", "1/2"], result.stdout
    assert all(" steps 4 " in line for line in lines)
    assert len({line.split(" fidelity ")[1] for line in lines}) == 1  # metrics gathered over both processes
    rank0, rank1 = (torch.load(tmp_path / "ddp" / f"weights_{r}_of_2.pt") for r in (0, 1))
    assert torch.equal(rank0, rank1)  # gradients synchronized

    # 2 processes x batch 4 = one process x batch 8: the loss is normalized over both processes' examples
    (tmp_path / "single").mkdir()
    single = subprocess.run([sys.executable, str(script), str(tmp_path / "single"), "8"], capture_output=True,
                            text=True, timeout=600, env=env, cwd=tmp_path)
    assert single.returncode == 0, single.stderr[-5000:]
    torch.testing.assert_close(torch.load(tmp_path / "single" / "weights_0_of_1.pt"), rank0, rtol=1e-4, atol=1e-5)
    print(f"accelerate launch with 2 processes took {elapsed:.1f} s")
