"""Asymmetric Duo quickstart: a large ViT plus a small timm CNN sidekick, fused with two temperatures.

    python examples/duo_quickstart.py                        # ~1-2 min on 2 CPU cores
    python examples/duo_quickstart.py --epochs 2 --output /tmp/duo

Trains both members on the embedded digits benchmark (no network), pairs them into a
`DuoForImageClassification`, fits the temperatures on the validation split, compares the large model
alone with the duo on the test split, then saves the duo with its `DuoImageProcessor` and reloads both
through the transformers Auto classes.
"""

import argparse
import tempfile
import time

import torch
from transformers import AutoImageProcessor, AutoModelForImageClassification, pipeline

import hf_uq  # noqa: F401  (registers the duo with the Auto classes)
from hf_uq import DuoForImageClassification, DuoImageProcessor
from hf_uq.calibration import fit_temperatures
from hf_uq.data import load_digits_benchmark
from hf_uq.evaluation.flops import member_flops
from hf_uq.functional import accuracy, aurc, ece, msp, nll
from hf_uq.models.tiny import tiny_cnn, tiny_cnn_image_processor, tiny_vit, tiny_vit_image_processor
from hf_uq.training import fit_classifier

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--output", default=None, help="folder for the saved duo (default: a temporary one)")
parser.add_argument("--epochs", type=float, default=30, help="training epochs of each member")
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
start = time.perf_counter()
torch.manual_seed(args.seed)

# 1. Data: digits 0-7 split 60/10/30 into train / validation / test (8x8 grayscale images).
benchmark = load_digits_benchmark(seed=args.seed)
print(f"train {len(benchmark['train'])}, validation {len(benchmark['validation'])}, test {len(benchmark['test'])}")

# 2. Two members with their own preprocessing: a 4-layer ViT and a timm ResNet at ~12 % of its FLOPs.
large_processor = tiny_vit_image_processor()
train = dict(epochs=args.epochs, num_threads=1, verbose=False)  # tiny models train fastest on 1 thread
large = fit_classifier(tiny_vit(seed=args.seed), benchmark, large_processor, seed=args.seed, **train)
small = tiny_cnn(channels=(8, 16, 32, 32), seed=args.seed + 1)
small_processor = tiny_cnn_image_processor(small)
small = fit_classifier(small, benchmark, small_processor, seed=args.seed + 1, **train)
print(f"trained both members in {time.perf_counter() - start:.1f} s")

# 3. The duo and its processor (each member keeps its own preprocessing: `pixel_values_small`).
duo = DuoForImageClassification.from_members(large, small).eval()
processor = DuoImageProcessor.from_members(large_processor, small_processor)


def batches(split, batch_size=128):
    """Processor outputs plus `labels`, ready for `duo(**batch)` and `duo.fit_temperatures`."""
    for first in range(0, len(split), batch_size):
        rows = split[first : first + batch_size]
        inputs = processor(rows["image"], return_tensors="pt")
        yield {**inputs, "labels": torch.tensor(rows["label"])}


# 4. Temperatures [T_large, T_small], fit on the validation split only (never on test).
temperatures = duo.fit_temperatures(list(batches(benchmark["validation"])))
print(f"duo temperatures: T_large = {temperatures[0]:.3f}, T_small = {temperatures[1]:.3f}")

# 5. Test metrics: the large model alone (raw, and temperature-scaled on validation) vs the duo.
with torch.no_grad():
    outputs = [(duo(**{k: v for k, v in b.items() if k != "labels"}), b["labels"])
               for b in batches(benchmark["test"])]
    val_large = torch.cat([duo.large(pixel_values=b["pixel_values"]).logits
                           for b in batches(benchmark["validation"])])
labels = torch.cat([y for _, y in outputs]).numpy()
fused = torch.cat([o.logits for o, _ in outputs])
large_logits = torch.cat([o.member_logits[0] for o, _ in outputs])
duo_uncertainty = torch.cat([o.uncertainty for o, _ in outputs])
val_labels = torch.tensor(benchmark["validation"]["label"])
t_single = float(fit_temperatures([val_large], val_labels)[0])
print(f"large alone, temperature scaling: T = {t_single:.3f}")

rows = {
    "large alone": (large_logits, None),
    "large, scaled T": (large_logits / t_single, None),
    "duo": (fused, duo_uncertainty),
}
print(f"\n{'test split':<18}{'accuracy':>10}{'NLL':>9}{'ECE':>9}{'AURCx100':>10}")
for name, (logits, uncertainty) in rows.items():
    probs = logits.softmax(-1).double().numpy()
    uncertainty = msp(probs) if uncertainty is None else uncertainty.numpy()
    correct = probs.argmax(-1) == labels
    print(f"{name:<18}{accuracy(probs, labels):>10.4f}{nll(probs, labels):>9.4f}"
          f"{ece(probs, labels):>9.4f}{100 * aurc(uncertainty, correct):>10.3f}")
print(f"({len(labels)} test images; duo uncertainty = 1 - p_duo(class of the large model))")

# 6. Cost: FLOPs per image of each member and the duo's overhead over the large model alone.
example = next(batches(benchmark["test"], batch_size=4))
flops = member_flops(duo, {k: v for k, v in example.items() if k != "labels"})
print(f"\nFLOPs per image: large {flops['large'] / 1e6:.2f} M, small {flops['small'] / 1e6:.2f} M, "
      f"duo {flops['total'] / 1e6:.2f} M; overhead over large: {flops['overhead_pct']:.1f} %")

# 7. Save the duo with its processor, reload both with the Auto classes, check the outputs are equal.
with tempfile.TemporaryDirectory() as scratch:
    folder = args.output or scratch
    duo.save_pretrained(folder)
    processor.save_pretrained(folder)
    reloaded = AutoModelForImageClassification.from_pretrained(folder).eval()
    reloaded_processor = AutoImageProcessor.from_pretrained(folder)
    images = benchmark["test"][:16]["image"]
    with torch.no_grad():
        before = duo(**processor(images, return_tensors="pt"))
        after = reloaded(**reloaded_processor(images, return_tensors="pt"))
    same = torch.equal(before.logits, after.logits) and torch.equal(before.uncertainty, after.uncertainty)
    print(f"\nsaved to {args.output or 'a temporary folder'}: {type(reloaded).__name__} + "
          f"{type(reloaded_processor).__name__}; reload check: {'OK' if same else 'MISMATCH'}")

    # 8. The standard pipeline works on the saved folder.
    classifier = pipeline("image-classification", model=folder)
    top = classifier(benchmark["test"][0]["image"], top_k=3)
    print(f"pipeline on one test image (label {benchmark['test'][0]['label']}): "
          + ", ".join(f"{p['label']} {p['score']:.3f}" for p in top))
print(f"\ntotal wall time: {time.perf_counter() - start:.1f} s")
if not same:
    raise SystemExit(1)
