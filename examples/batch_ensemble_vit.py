"""BatchEnsembleViT on the embedded digits: 4 members at about one ViT's parameters, in one batched forward.

    python examples/batch_ensemble_vit.py                   # ~3-5 min on 2 CPU cores
    python examples/batch_ensemble_vit.py --epochs 2 --finetune-epochs 1 --output /tmp/be

Trains a tiny ViT, converts it with `BatchEnsembleViTForImageClassification.from_vit` (shared weights copied,
fast weights drawn from N(1, 0.5^2) so that members start as perturbations of the trained ViT), fine-tunes the
BatchEnsemble with `fit_classifier` (the stock `Trainer`: each member trains on its own tile of every batch, fast
weights undecayed), once over every block and once as a latent ensemble over the last two blocks only, then
compares them with the single ViT on the test split (accuracy, NLL, ECE, AURC) and on out-of-distribution
data (AUROC of the predictive entropy for unseen digits 8-9, "near", and natural-image patches, "far"), and
finally saves the full BatchEnsemble and reloads it through `AutoModelForImageClassification`.
"""

import argparse
import tempfile
import time

import torch
from transformers import AutoModelForImageClassification

import hf_uq  # noqa: F401  (registers BatchEnsembleViT with the Auto classes)
from hf_uq.data import load_digits_benchmark
from hf_uq.evaluation import count_parameters, flops_per_image, predict, score_split
from hf_uq.models.batch_ensemble_vit import BatchEnsembleViTForImageClassification
from hf_uq.models.tiny import tiny_vit, tiny_vit_image_processor
from hf_uq.training import fit_classifier

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--output", default=None, help="folder for the saved model (default: a temporary one)")
parser.add_argument("--epochs", type=float, default=30, help="training epochs of the single ViT")
parser.add_argument("--finetune-epochs", type=float, default=10, help="fine-tuning epochs of the BatchEnsembles")
parser.add_argument("--members", type=int, default=4, help="ensemble size M")
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
start = time.perf_counter()

# 1. Data (digits 0-7; 8-9 and natural-image patches are out of distribution) and a trained single ViT.
benchmark = load_digits_benchmark(seed=args.seed)
processor = tiny_vit_image_processor()
train = dict(num_threads=1, verbose=False, seed=args.seed)  # tiny models train fastest on 1 thread
single = fit_classifier(tiny_vit(seed=args.seed), benchmark, processor, epochs=args.epochs, **train)
print(f"trained the single ViT in {time.perf_counter() - start:.1f} s")

# 2. Convert: every block (full) or only the last two (latent ensemble), then fine-tune with the stock Trainer.
models = {"single ViT": single}
for name, layers in (("BatchEnsemble full", None), ("BatchEnsemble last 2", [-2, -1])):
    torch.manual_seed(args.seed)
    converted = BatchEnsembleViTForImageClassification.from_vit(
        single, ensemble_size=args.members, ensemble_layers=layers, fast_weight_init="normal"
    )
    models[name] = fit_classifier(converted, benchmark, processor, epochs=args.finetune_epochs, **train)
print(f"fine-tuned both BatchEnsembles after {time.perf_counter() - start:.1f} s")

# 3. Cost relative to the single ViT: parameters and FLOPs per image.
example = torch.zeros(1, 3, 16, 16)
base_params, base_flops = count_parameters(single), flops_per_image(single, example)
for name, model in models.items():
    print(f"cost {name}: parameters {count_parameters(model) / base_params:.3f}x, "
          f"FLOPs {flops_per_image(model, example) / base_flops:.3f}x")

# 4. Metrics on the test split and OOD AUROC (uncertainty: 1 - max p for the ViT, predictive entropy for BE).
print(f"\n{'model':22s} {'accuracy':>9s} {'NLL':>7s} {'ECE':>7s} {'AURCx100':>9s} {'AUROC near':>11s} {'AUROC far':>10s}")
for name, model in models.items():
    predictions = {split: predict(model, benchmark[split], processor, progress=False, num_threads=1)
                   for split in ("test", "ood_near", "ood_far")}
    scores = score_split(predictions["test"], ood={"near": predictions["ood_near"], "far": predictions["ood_far"]},
                         bootstrap=0)
    values = [scores[k].estimate for k in ("accuracy", "nll", "ece", "aurc", "near/auroc", "far/auroc")]
    values[3] *= 100
    print(f"{name:22s} {values[0]:>9.4f} {values[1]:>7.4f} {values[2]:>7.4f} {values[3]:>9.3f} "
          f"{values[4]:>11.4f} {values[5]:>10.4f}")

# 5. Save the full BatchEnsemble and reload it with the transformers Auto class.
model = models["BatchEnsemble full"]
with tempfile.TemporaryDirectory() as scratch:
    folder = args.output or scratch
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    reloaded = AutoModelForImageClassification.from_pretrained(folder).eval()
    pixel_values = processor(benchmark["test"][:8]["image"], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        before, after = model(pixel_values), reloaded(pixel_values)
    same = torch.equal(before.logits, after.logits) and torch.equal(before.member_logits, after.member_logits)
    print(f"\nreloaded {type(reloaded).__name__} ({reloaded.config.ensemble_size} members, member logits "
          f"{tuple(after.member_logits.shape)}): reload check: {'OK' if same else 'FAILED'}")
print(f"done in {time.perf_counter() - start:.1f} s")
