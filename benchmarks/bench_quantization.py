"""Quantization that keeps the uncertainty: float vs optimum-quanto w8, quanto w8a8 and bitsandbytes int8, side by side.

    python benchmarks/bench_quantization.py                       # ~8-15 min on 2 busy CPU cores
    python benchmarks/bench_quantization.py --epochs 5 --no-scaling
    python benchmarks/bench_quantization.py --widths 64 384 768 1024 --repeats 50

Part 1, trained models (the embedded digits benchmark, so that ECE and Spearman mean something): a tiny ViT
(4 layers, width 64) and a duo (that ViT + a small timm ResNet sidekick, temperatures fit on validation). For
each, four variants: float; quanto w8 (int8 weights); quanto w8a8 (int8 weights, static int8 activations
calibrated on the validation split); bitsandbytes int8 (LLM.int8(), dynamic int8 activations, nn.Linear only).
Columns: weight-bytes ratio (`weight_bytes`), P50 latency ratio at batch 1 and 32 (the four variants timed
round-robin in one `compare_latency` call per batch size, 1 thread), delta ECE in points, delta NLL, OOD AUROC
deltas and the Spearman correlation of the uncertainties on test + OOD (`quantization_drift`). Targets: w8a8
latency <= 0.5x float with delta ECE <= 0.5 points and Spearman >= 0.95; int8 weight bytes <= 0.3x float.

Part 2, where int8 can win on CPU (random weights; latency does not depend on them): (a) the kernel ceiling,
`torch._int_mm` (int8 x int8 -> int32, what quanto w8a8 and bitsandbytes int8 call) vs float32 `mm`; (b) one
linear layer per backend at a small and a large shape, which separates the fixed per-call cost of the quantized
layers from their arithmetic; (c) 4-layer ViTs of growing width at batch 1 and 32, same four variants.
Part 3: a width-768 (ViT-Base-wide), 2-layer ViT trained briefly on digits, the four variants as in part 1.

Findings (2-core development machine shared with other jobs, load 4-9; ratios from interleaved runs, 3 runs):
- Uncertainty survives int8 everywhere: every int8 variant of every model kept |delta ECE| <= 0.42 points,
  Spearman >= 0.987, |delta OOD AUROC| <= 0.006 and top-1 agreement >= 0.99.
- Weight bytes: quanto int8 0.286x (tiny ViT; what remains is LayerNorms, biases, position embeddings and the
  float32 per-channel scales), 0.284x (duo), 0.253x (width 768): target met. bitsandbytes int8 0.302x (tiny
  ViT: the patch-embedding convolution stays float32) and 0.462x for the duo, whose ResNet sidekick is all
  convolutions: bitsandbytes quantizes nn.Linear only. At width 768 it is 0.255x.
- Latency target (w8a8 <= 0.5x float) is missed on the digits-sized models (w8a8 1.5-5.4x at batch 1,
  1.4-1.8x at batch 32, varying with load) and met on wide ones: w8a8 0.32-0.40x at batch 32 and 0.40-0.55x
  at batch 1 at width 768 (random and trained), 0.38x / 0.55x on the trained width-768 ViT with delta ECE
  -0.40 points and Spearman 0.9999. The break-even is near width 192 at batch 32 and width 384 at batch 1.
- Why: `torch._int_mm` itself is 4-10x faster than float32 `mm` from width 192 up (AVX512-VNNI), but each
  quantized layer pays a fixed ~0.05-0.15 ms per call in Python (tensor-subclass dispatch, quantizing the input,
  the int32 -> float rescale; part 2b: a 17x64 layer costs 0.024 ms float, 0.12 ms w8a8, 0.17 ms bitsandbytes),
  and the tiny ViT is 26 such layers around 1.7-6 ms of float work. quanto w8 (weight-only) is never faster on
  CPU: its CPU kernel dequantizes the whole weight on every call and then runs the float matmul (1.0-1.8x,
  up to 4.7x on the tiny ViT at batch 1); it only saves memory. bitsandbytes int8 casts activations to float16, quantizes them per row, calls
  `_int_mm` and dequantizes: slower than quanto w8a8 at every size here, 0.44x at width 768 batch 32.
  PyTorch's dynamic quantization is not an hf_uq backend and was not used.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from torch import nn

import hf_uq  # noqa: F401  (Auto-class and quantizer registrations)
from hf_uq import DuoForImageClassification, DuoImageProcessor
from hf_uq.data import load_digits_benchmark
from hf_uq.evaluation import compare_latency, iter_batches, quantization_drift, weight_bytes
from hf_uq.models.tiny import tiny_cnn, tiny_cnn_image_processor, tiny_vit, tiny_vit_image_processor
from hf_uq.quantization import QuantizationSkipWarning, is_backend_available, quantize
from hf_uq.training import fit_classifier

VARIANTS = ("float", "quanto w8", "quanto w8a8", "bnb int8")


def make_variants(model: nn.Module, calibration, processor) -> dict[str, nn.Module]:
    """The float model and its three quantized versions (bitsandbytes only when installed)."""
    variants = {"float": model}
    variants["quanto w8"] = quantize(model, "quanto", "int8")
    variants["quanto w8a8"] = quantize(model, "quanto", "int8", "int8", calibration_dataset=calibration,
                                       image_processor=processor, max_calibration_batches=8)
    if is_backend_available("bitsandbytes"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", QuantizationSkipWarning)  # convolutions stay float: counted in bytes
            variants["bnb int8"] = quantize(model, "bitsandbytes", "int8")
    return variants


def batch_of(inputs: dict[str, torch.Tensor], size: int) -> dict[str, torch.Tensor]:
    index = torch.arange(size) % len(inputs["pixel_values"])
    return {k: v[index].contiguous() for k, v in inputs.items()}


def latency_ratios(variants, inputs, batch_sizes, repeats) -> dict[int, dict[str, float]]:
    """P50 latency of each variant over the float model's, all timed interleaved, per batch size."""
    out = {}
    for size in batch_sizes:
        stats = compare_latency(variants, batch_of(inputs, size), repeats=repeats, threads=1)
        out[size] = {name: s.p50 / stats["float"].p50 for name, s in stats.items()}
        out[size]["float_ms"] = 1e3 * stats["float"].p50
    return out


def compare_variants(name: str, model: nn.Module, processor, benchmark, repeats: int) -> list[dict]:
    """Drift (`quantization_drift`) and interleaved latency ratios of the four variants of one trained model."""
    variants = make_variants(model, benchmark["validation"], processor)
    inputs = next(iter_batches(benchmark["test"], processor, batch_size=32))
    inputs.pop("labels")
    timing = latency_ratios(variants, inputs, (1, 32), repeats)
    rows = []
    for variant, quantized in variants.items():
        drift = quantization_drift(model, quantized, benchmark, image_processor=processor, latency_batch_sizes=())
        rows.append({"model": name, "variant": variant, "drift": drift, "lat1": timing[1][variant],
                     "lat32": timing[32][variant], "float_ms": (timing[1]["float_ms"], timing[32]["float_ms"])})
    return rows


def part_one(args, benchmark) -> list[dict]:
    train = dict(epochs=args.epochs, num_threads=1, verbose=False)
    start = time.perf_counter()
    vit_processor = tiny_vit_image_processor()
    vit = fit_classifier(tiny_vit(seed=args.seed), benchmark, vit_processor, seed=args.seed, **train)
    small = tiny_cnn(channels=(8, 16, 32, 32), seed=args.seed + 1)
    small_processor = tiny_cnn_image_processor(small)
    small = fit_classifier(small, benchmark, small_processor, seed=args.seed + 1, **train)
    duo = DuoForImageClassification.from_members(vit, small).eval()
    duo_processor = DuoImageProcessor.from_members(vit_processor, small_processor)
    duo.fit_temperatures(list(iter_batches(benchmark["validation"], duo_processor, batch_size=128)))
    print(f"trained the ViT and the sidekick ({args.epochs:g} epochs each) in {time.perf_counter() - start:.0f} s")
    return (compare_variants("ViT", vit.eval(), vit_processor, benchmark, args.repeats)
            + compare_variants("duo", duo, duo_processor, benchmark, args.repeats))


def part_three(args, benchmark) -> list[dict]:
    """A ViT-Base-wide model (width 768, MLP 3072, 12 heads, 2 layers) trained briefly: where int8 matmuls pay off."""
    start = time.perf_counter()
    processor = tiny_vit_image_processor()
    wide = tiny_vit(hidden_size=768, intermediate_size=3072, num_attention_heads=12, num_hidden_layers=2,
                    seed=args.seed)
    wide = fit_classifier(wide, benchmark, processor, epochs=args.wide_epochs, learning_rate=1e-3, seed=args.seed,
                          num_threads=args.train_threads, verbose=False)
    print(f"trained the wide ViT ({args.wide_epochs:g} epochs) in {time.perf_counter() - start:.0f} s")
    return compare_variants("wide", wide.eval(), processor, benchmark, max(8, args.repeats // 3))


def print_rows(title: str, rows) -> None:
    print(f"\n{title}")
    head = (f"{'model':<6}{'variant':<13}{'bytes':>7}{'lat@1':>7}{'lat@32':>8}{'dECE pt':>9}{'dNLL':>8}"
            f"{'dAUROCn':>9}{'dAUROCf':>9}{'Spearman':>9}{'agree':>7}  targets")
    print(head)
    for row in rows:
        d = row["drift"]
        checks = []
        if row["variant"] != "float":
            checks.append(f"bytes<=0.3 {'OK' if d['weight_bytes_ratio'] <= 0.3 else 'MISS'}")
            ok = d["delta_ece"] <= 0.005 and d["spearman"] >= 0.95
            checks.append(f"UQ {'OK' if ok else 'MISS'}")
        if row["variant"] == "quanto w8a8":
            checks.append(f"lat<=0.5 {'OK' if max(row['lat1'], row['lat32']) <= 0.5 else 'MISS'}")
        print(f"{row['model']:<6}{row['variant']:<13}{d['weight_bytes_ratio']:>7.3f}{row['lat1']:>7.2f}"
              f"{row['lat32']:>8.2f}{100 * d['delta_ece']:>+9.2f}{d['delta_nll']:>+8.4f}"
              f"{d['delta_ood_auroc/ood_near']:>+9.4f}{d['delta_ood_auroc/ood_far']:>+9.4f}{d['spearman']:>9.4f}"
              f"{d['top1_agreement']:>7.3f}  {', '.join(checks)}")
    for row in rows:
        if row["variant"] == "float":
            ref = row["drift"]["reference"]
            print(f"{row['model']} float: accuracy {ref['accuracy']:.4f}, ECE {100 * ref['ece']:.2f} pt, "
                  f"NLL {ref['nll']:.4f}, AUROC near {ref['ood_auroc/ood_near']:.4f} far "
                  f"{ref['ood_auroc/ood_far']:.4f}; P50 {row['float_ms'][0]:.2f} ms @1, {row['float_ms'][1]:.2f} ms @32")


# ------------------------------------------------------------------------------------------ part 2


def median_time(fn, repeats: int) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def kernel_ceiling(widths, rows_list, repeats) -> None:
    print("\nPart 2a: kernel ceiling, torch._int_mm (int8) vs float32 mm, 1 thread (rows = batch x tokens)")
    print(f"{'rows':>6}{'K=N':>6}{'fp32 ms':>10}{'int8 ms':>10}{'ratio':>7}")
    for rows in rows_list:
        for width in widths:
            a, b = torch.randn(rows, width), torch.randn(width, width)
            ai = torch.randint(-127, 128, (rows, width), dtype=torch.int8)
            bi = torch.randint(-127, 128, (width, width), dtype=torch.int8)
            with torch.inference_mode():
                f32 = median_time(lambda a=a, b=b: a @ b, repeats)
                i8 = median_time(lambda ai=ai, bi=bi: torch._int_mm(ai, bi), repeats)
            print(f"{rows:>6}{width:>6}{1e3 * f32:>10.3f}{1e3 * i8:>10.3f}{i8 / f32:>7.2f}")


class _OneLayer(nn.Module):
    """A single nn.Linear behind a `pixel_values` forward, so that `quantize` and `compare_latency` accept it."""

    def __init__(self, width: int):
        super().__init__()
        self.layer = nn.Linear(width, width)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.layer(pixel_values)


def one_layer(shapes, repeats) -> None:
    print("\nPart 2b: one nn.Linear, P50 ms (ratio to float), 1 thread")
    print(f"{'rows':>6}{'K=N':>6}" + "".join(f"{v:>20}" for v in VARIANTS))
    for rows, width in shapes:
        layer = _OneLayer(width).eval()
        x = torch.randn(rows, width)
        variants = make_variants(layer, [x[None]], None)  # calibration batches: [(1, rows, width)]
        stats = compare_latency(variants, x[None], repeats=repeats, threads=1)
        base = stats["float"].p50
        cells = "".join(f"{1e3 * s.p50:>11.3f} ({s.p50 / base:>4.2f}x)" for s in stats.values())
        print(f"{rows:>6}{width:>6}{cells}")


def vit_scaling(widths, repeats) -> None:
    print("\nPart 2c: 4-layer ViTs (16x16 inputs, patch 4: 17 tokens), random weights; P50 ratio to float, 1 thread")
    print(f"{'width':>6}{'MB fp32':>9}{'batch':>6}{'float ms':>10}" + "".join(f"{v:>13}" for v in VARIANTS[1:]))
    for width in widths:
        model = tiny_vit(hidden_size=width, intermediate_size=4 * width, num_attention_heads=max(1, width // 64),
                         hidden_dropout_prob=0.0).eval()
        calibration = torch.randn(64, 3, 16, 16, generator=torch.Generator().manual_seed(0))
        variants = make_variants(model, calibration, None)
        inputs = {"pixel_values": torch.randn(32, 3, 16, 16)}
        for size in (1, 32):
            reps = repeats if width <= 256 else max(5, repeats // 4)
            stats = compare_latency(variants, batch_of(inputs, size), repeats=reps, threads=1)
            base = stats["float"].p50
            cells = "".join(f"{stats[v].p50 / base:>13.2f}" for v in VARIANTS[1:] if v in stats)
            print(f"{width:>6}{weight_bytes(model) / 2**20:>9.1f}{size:>6}{1e3 * base:>10.2f}{cells}")
        del variants, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=float, default=30, help="training epochs of each tiny digits model")
    parser.add_argument("--repeats", type=int, default=30, help="timed forwards per variant and batch size")
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 192, 384, 768])
    parser.add_argument("--no-scaling", action="store_true", help="skip part 2")
    parser.add_argument("--wide-epochs", type=float, default=6, help="epochs of the width-768 ViT (0 skips part 3)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.train_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = time.perf_counter()
    benchmark = load_digits_benchmark(seed=args.seed)
    print_rows("Part 1: tiny models trained on digits (test 433, ood_near 354, ood_far 433); ratios to float, 1 thread",
               part_one(args, benchmark))
    if not args.no_scaling:
        kernel_ceiling(args.widths, (17, 544), max(10, args.repeats // 2))
        one_layer([(17, 64), (544, 64), (544, 768)], args.repeats)
        vit_scaling(args.widths, args.repeats)
    if args.wide_epochs:
        print_rows("Part 3: a width-768, 2-layer ViT trained on digits; ratios to float, 1 thread",
                   part_three(args, benchmark))
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
