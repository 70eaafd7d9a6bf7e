"""Ensemble Distribution Distillation: a 5-member deep ensemble of tiny ViTs into one Dirichlet student.

    python examples/distill_dirichlet.py                      # ~2-3 min on 2 idle CPU cores
    python examples/distill_dirichlet.py --members 2 --epochs 1 --student-epochs 1 --output /tmp/student

Trains the teacher's members on the embedded digits benchmark (no network), distills the ensemble into a
`DirichletStudentForImageClassification` with `EnsembleDistillationTrainer` (Dirichlet NLL of the members'
predictions, temperature annealed to 1), then compares teacher and student on the test split and on the OOD
splits, saves the student and reloads it through the transformers Auto classes.

The student also trains on unlabelled mixups of training digits: distribution distillation learns the ensemble's
diversity only where it sees some, and the members agree on almost every clean training digit.
"""

import argparse
import tempfile
import time

import numpy as np
import torch
from transformers import AutoModelForImageClassification, PrinterCallback

import hf_uq  # noqa: F401  (registers the hf_uq models with the Auto classes)
from hf_uq.data import load_digits_benchmark
from hf_uq.evaluation import iter_batches, predict
from hf_uq.functional import accuracy, ece, fidelity, nll, ood_auroc
from hf_uq.models.deep_ensemble import DeepEnsembleForImageClassification
from hf_uq.models.dirichlet_student import DirichletStudentForImageClassification
from hf_uq.models.tiny import tiny_vit, tiny_vit_image_processor
from hf_uq.trainer import EnsembleDistillationConfig, EnsembleDistillationTrainer
from hf_uq.training import fit_classifier

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--members", type=int, default=5, help="members of the teacher ensemble")
parser.add_argument("--epochs", type=float, default=30, help="training epochs of each member")
parser.add_argument("--student-epochs", type=float, default=30)
parser.add_argument("--output", default=None, help="folder for the saved student (default: a temporary one)")
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
start = time.perf_counter()
torch.set_num_threads(1)  # tiny models train fastest on one thread

# 1. Data: digits 0-7 (train / validation / test), digits 8-9 (near OOD) and photo patches (far OOD).
benchmark = load_digits_benchmark(seed=args.seed)
processor = tiny_vit_image_processor()

# 2. The teacher: members that differ only by their initialization and data order.
members = [
    fit_classifier(tiny_vit(seed=1000 * args.seed + m), benchmark, processor, epochs=args.epochs,
                   seed=1000 * args.seed + m, verbose=False, num_threads=1)
    for m in range(args.members)
]
teacher = DeepEnsembleForImageClassification.from_members(members).eval()
print(f"trained {args.members} members in {time.perf_counter() - start:.0f} s")

# 3. Student inputs: the training digits plus as many unlabelled mixups of two digits of different classes.
batches = list(iter_batches(benchmark["train"], processor, batch_size=512))
pixels, labels = torch.cat([b["pixel_values"] for b in batches]), torch.cat([b["labels"] for b in batches])
generator = torch.Generator().manual_seed(args.seed)
first, second = torch.randint(len(pixels), (2, len(pixels)), generator=generator)
keep = labels[first] != labels[second]
weight = 0.3 + 0.4 * torch.rand(int(keep.sum()), 1, 1, 1, generator=generator)
mixups = weight * pixels[first[keep]] + (1 - weight) * pixels[second[keep]]
inputs = torch.cat([pixels, mixups])
rows = [{"pixel_values": x} for x in inputs]  # no labels needed: the teacher gives the targets

# 4. Distill: Dirichlet NLL of every member's prediction, temperature annealed from 2.5 to 1.
student = DirichletStudentForImageClassification.from_backbone(tiny_vit(seed=1000 * args.seed + 777))
with tempfile.TemporaryDirectory() as scratch:
    config = EnsembleDistillationConfig(
        output_dir=scratch, distillation_loss="dirichlet_nll", initial_temperature=2.5, annealing_fraction=0.5,
        num_train_epochs=args.student_epochs, learning_rate=3e-3, weight_decay=0.05, lr_scheduler_type="cosine",
        warmup_steps=0.1, per_device_train_batch_size=64, seed=args.seed, use_cpu=True, report_to="none",
        save_strategy="no", logging_strategy="no", disable_tqdm=True,
    )
    trainer = EnsembleDistillationTrainer(model=student, teacher=teacher, args=config, train_dataset=rows)
    trainer.remove_callback(PrinterCallback)
    trainer.train()
student.eval()
print(f"distilled into the student ({len(rows)} inputs, {len(mixups)} of them mixups) "
      f"at {time.perf_counter() - start:.0f} s")

# 5. Teacher vs student: calibration on test, OOD detection, and the fidelity of the student's epistemic
#    uncertainty to the ensemble's mutual information (Spearman over test + OOD; >= 0.7 keeps the diversity).
splits = ("test", "ood_near", "ood_far")
preds = {name: {s: predict(model, benchmark[s], processor, batch_size=256, progress=False) for s in splits}
         for name, model in (("teacher", teacher), ("student", student))}
print(f"\n{'model':<10}{'accuracy':>10}{'NLL':>8}{'ECE':>8}{'AUROC near':>12}{'AUROC far':>11}")
for name, p in preds.items():
    test = p["test"]
    near, far = (ood_auroc(test.uncertainty, p[s].uncertainty) for s in ("ood_near", "ood_far"))
    print(f"{name:<10}{accuracy(test.probs, test.labels):>10.4f}{nll(test.probs, test.labels):>8.4f}"
          f"{ece(test.probs, test.labels):>8.4f}{near:>12.4f}{far:>11.4f}")
union = {name: {k: np.concatenate([getattr(p[s], f"{k}_uncertainty") for s in splits])
                for k in ("epistemic", "total")} for name, p in preds.items()}
print(f"\nfidelity, student epistemic vs teacher mutual information: "
      f"{fidelity(union['student']['epistemic'], union['teacher']['epistemic']):.3f}")
print(f"fidelity, student total vs teacher total uncertainty: "
      f"{fidelity(union['student']['total'], union['teacher']['total']):.3f}")

# 6. Save and reload through the Auto classes (after `import hf_uq`; or trust_remote_code=True without it).
output = args.output or tempfile.mkdtemp(prefix="dirichlet_student_")
student.save_pretrained(output)
reloaded = AutoModelForImageClassification.from_pretrained(output).eval()
example = next(iter_batches(benchmark["test"], processor, batch_size=8))["pixel_values"]
with torch.no_grad():
    same = torch.equal(student(pixel_values=example).alphas, reloaded(pixel_values=example).alphas)
print(f"\nsaved to {output}; reload check: {'OK' if same else 'MISMATCH'}")
with torch.no_grad():
    out = reloaded(pixel_values=example[:1])
print(f"one test image: class {int(out.logits.argmax())}, alpha_0 {float(out.alphas.sum()):.1f}, "
      f"total {float(out.total_uncertainty):.4f} = aleatoric {float(out.aleatoric_uncertainty):.4f} "
      f"+ epistemic {float(out.epistemic_uncertainty):.4f} nats")
print(f"done in {time.perf_counter() - start:.0f} s")
