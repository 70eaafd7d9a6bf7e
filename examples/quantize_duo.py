"""Quantize an Asymmetric Duo and check that its uncertainty survived: drift report, save, reload.

    python examples/quantize_duo.py                                  # ~1-2 min on 2 CPU cores
    python examples/quantize_duo.py --epochs 2 --output /tmp/duo-w8a8
    python examples/quantize_duo.py --backend bitsandbytes --activations none

Trains a tiny duo (a 4-layer ViT plus a small timm CNN sidekick) on the embedded digits benchmark (no
network), fits its two temperatures on the validation split, quantizes it (optimum-quanto int8 weights and
calibrated int8 activations by default), then compares the quantized duo with the float one on the test split
and the two OOD splits: calibration (ECE, NLL), selective risk (AURC), OOD AUROC, the Spearman correlation of the
two models' uncertainties, weight bytes and latency. Finally it saves the quantized duo, reloads it through
`AutoModelForImageClassification` and checks that the outputs are identical.
"""

import argparse
import tempfile
import time

import torch
from transformers import AutoModelForImageClassification

import hf_uq
from hf_uq import DuoForImageClassification, DuoImageProcessor
from hf_uq.data import load_digits_benchmark
from hf_uq.evaluation import DriftBounds, iter_batches, quantization_drift
from hf_uq.models.tiny import tiny_cnn, tiny_cnn_image_processor, tiny_vit, tiny_vit_image_processor
from hf_uq.quantization import quantize
from hf_uq.training import fit_classifier

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=float, default=20, help="training epochs of each member")
parser.add_argument("--backend", default="quanto", choices=["quanto", "bitsandbytes"])
parser.add_argument("--weights", default="int8", help="int8, int4, ...")
parser.add_argument("--activations", default="int8", help="int8 or none (bitsandbytes: none)")
parser.add_argument("--output", default=None, help="folder for the quantized duo (default: a temporary one)")
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
activations = None if args.activations.lower() == "none" else args.activations
start = time.perf_counter()
torch.set_num_threads(1)  # tiny models run fastest on one thread, and latency is timed on one

# 1. A trained duo with its processor (each member keeps its own preprocessing) and fitted temperatures.
benchmark = load_digits_benchmark(seed=args.seed)
train = dict(epochs=args.epochs, num_threads=1, verbose=False)
large_processor, small = tiny_vit_image_processor(), tiny_cnn(channels=(8, 16, 32, 32), seed=args.seed + 1)
small_processor = tiny_cnn_image_processor(small)
large = fit_classifier(tiny_vit(seed=args.seed), benchmark, large_processor, seed=args.seed, **train)
small = fit_classifier(small, benchmark, small_processor, seed=args.seed + 1, **train)
duo = DuoForImageClassification.from_members(large, small).eval()
processor = DuoImageProcessor.from_members(large_processor, small_processor)
temperatures = duo.fit_temperatures(list(iter_batches(benchmark["validation"], processor, batch_size=128)))
print(f"trained the duo in {time.perf_counter() - start:.1f} s; T_large = {temperatures[0]:.3f}, "
      f"T_small = {temperatures[1]:.3f}")

# 2. Quantize. Static int8 activations are calibrated on the validation split (never on test).
quantized = quantize(duo, backend=args.backend, weights=args.weights, activations=activations,
                     calibration_dataset=benchmark["validation"], image_processor=processor)
info = quantized.hf_uq_quantization
print(f"{info.label}: {len(info.modules)} layers quantized, {len(info.skipped)} kept in float")

# 3. Drift: the float duo vs the quantized duo on test + OOD splits (latency timed interleaved, 1 thread).
drift = quantization_drift(duo, quantized, benchmark, image_processor=processor, latency_batch_sizes=(1, 32))
print(f"\n{'metric':<22}{'float':>10}{'quantized':>11}{'delta':>10}")
for name in drift["reference"]:
    ref, quant = drift["reference"][name], drift["quantized"][name]
    print(f"{name:<22}{ref:>10.4f}{quant:>11.4f}{quant - ref:>+10.4f}")
print(f"delta ECE = {100 * drift['delta_ece']:+.2f} points, Spearman = {drift['spearman']:.4f}, "
      f"top-1 agreement = {drift['top1_agreement']:.4f}")
print(f"weight bytes: float {drift['weight_bytes_reference'] / 1024:.1f} KiB, quantized "
      f"{drift['weight_bytes_quantized'] / 1024:.1f} KiB (ratio {drift['weight_bytes_ratio']:.3f})")
print(f"latency ratio (quantized / float): batch 1 = {drift['latency_ratio@1']:.2f}, "
      f"batch 32 = {drift['latency_ratio@32']:.2f}")
violations = DriftBounds().violations(drift)
print("within the default bounds (delta ECE <= 0.5 points, Spearman >= 0.95): "
      + ("yes" if not violations else "NO: " + "; ".join(violations)))

# 4. Save, reload through the Auto class, and check the outputs are identical.
with tempfile.TemporaryDirectory() as scratch:
    folder = args.output or scratch
    quantized.save_pretrained(folder)
    processor.save_pretrained(folder)
    reloaded = AutoModelForImageClassification.from_pretrained(folder)
    inputs = processor(benchmark["test"][:32]["image"], return_tensors="pt")
    with torch.no_grad():
        before, after = quantized(**inputs), reloaded(**inputs)
    same = torch.equal(before.logits, after.logits) and torch.equal(before.uncertainty, after.uncertainty)
    print(f"\nsaved to {args.output or 'a temporary folder'}; reloaded {type(reloaded).__name__} "
          f"({reloaded.hf_uq_quantization.label}); reload check: {'OK' if same else 'MISMATCH'}")
    print(f"hf_uq.load_quantized gives the same model: {type(hf_uq.quantization.load_quantized(folder)).__name__}")
print(f"total wall time: {time.perf_counter() - start:.1f} s")
if not same:
    raise SystemExit(1)
