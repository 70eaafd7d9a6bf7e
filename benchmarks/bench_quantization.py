"""Quantization that keeps the uncertainty: float vs optimum-quanto w8 / w8a8 and bitsandbytes int8, side by side,
eager and under `torch.compile`.

    python benchmarks/bench_quantization.py                       # ~30 min, plus ~45 min the first time (part 3 training)
    python benchmarks/bench_quantization.py --epochs 5 --no-scaling --small-epochs 1 --no-compile
    python benchmarks/bench_quantization.py --widths 64 384 768 --repeats 50
    python benchmarks/bench_quantization.py --no-tiny --no-scaling      # part 3 only

Every latency is a P50 ratio to the eager float model, all variants of one model timed round-robin in one
`compare_latency` call per batch size (1 thread, interleaved), and the load average is printed with each table:
the machine is shared, so only ratios measured side by side mean anything.

Variants: float; quanto w8 (int8 weights); quanto w8a8 (int8 weights, static int8 activations calibrated on the
validation split; hf_uq's fused `FusedW8A8QLinear` path); bnb int8 (LLM.int8(), nn.Linear only); and, unless
`--no-compile`, `torch.compile` of the float model and of the w8a8 model ("float cc", "w8a8 cc"; default inductor
backend, compiled once per batch size during warmup, not timed). A compiled model computes the same function as its
eager twin up to float rounding (the printed max |delta logit|), so its drift columns are those of the eager twin.
The column `cc/cc` is w8a8 compiled over float compiled: the fair ratio when both sides are compiled.

Part 1, trained tiny models (the embedded digits benchmark, so that ECE and Spearman mean something): the default
tiny ViT (4 layers, width 64, 16x16 inputs, 17 tokens) and a duo (that ViT + a small timm ResNet sidekick,
temperatures fit on validation). Columns: weight-bytes ratio, latency ratios at batch 1 and 32, delta ECE in
points, delta NLL, OOD AUROC deltas, Spearman correlation of the uncertainties on test + OOD and top-1 agreement
(`quantization_drift`). Targets: w8a8 latency <= 0.5x float with delta ECE <= 0.5 points and Spearman >= 0.95;
int8 weight bytes <= 0.3x float.

Part 2, where int8 can win on CPU (random weights): (a) the kernel ceiling, `torch._int_mm` vs float32 `mm`; (b)
one nn.Linear per variant, optimum-quanto's own w8a8 `QLinear` included ("w8a8 quanto"), which separates the fixed
per-call cost from the arithmetic; (c) 4-layer ViTs of growing width.

Part 3, realistic widths: a ViT-S-shaped model (hidden 384, 6 heads, MLP 1536, 12 layers; 32x32 inputs with patch
4, i.e. 65 tokens: the ViT-S/16 shape at CIFAR resolution, not a pretrained ViT-S) trained from scratch on the
digits upsampled to 32x32 (30 epochs, 98.4 % test accuracy), and a duo of it with a ViT sidekick (hidden 192, 6
layers: 1/8 of its FLOPs). Both are kept in `--cache-dir` and reused while their recipe is unchanged (training
them takes ~45 min on 2 cores; a run that reuses them takes ~27 min).

Findings (session 4, load ~1; BENCHMARKS.md has the tables):
- Latency target (w8a8 <= 0.5x float at batch 1 and 32) is met on the ViT-S (0.44x / 0.38x eager, 0.33x / 0.31x
  compiled; delta ECE -0.01 pt, Spearman 0.9998) and on its duo (0.49x / 0.39x eager, 0.34x / 0.33x compiled;
  delta ECE -0.18 pt, Spearman 0.9993). The duo's batch-1 margin is thin: a run that timed 7 rounds at batch 1 gave
  0.57x, hence 30 rounds at batch 1 now (`--repeats`); batch 32 keeps a quarter of them (~1 s per ViT-S forward).
- It is out of reach for the 64-wide tiny ViT and its duo, and no engineering inside `quantize` can close it: the
  profile of the float tiny ViT (aten self time) puts the linear matmuls at 24 % of its op time at batch 1 and
  42 % at batch 32, so even infinitely fast linears leave >= 0.76x / 0.58x (Amdahl). The rest is LayerNorm, GELU,
  attention, reshapes and per-op dispatch, which int8 weights do not touch. Measured: eager w8a8 1.54x / 1.06x
  (ViT), 1.77x / 1.28x (duo); compiling removes the Python overhead of both sides alike (compiled w8a8 over
  compiled float 1.14x / 0.87x for the ViT, 1.16x / 0.93x for the duo).
- What closed the gap at width 384: (1) hf_uq's `FusedW8A8QLinear` (same arithmetic as optimum-quanto's `QLinear`,
  bit for bit, without its pre-hook, activation tensor subclass and autograd-function dispatch): 0.143 -> 0.067 ms
  per 17x64 layer call (float 0.032), 3.67 -> 2.59 ms at 544x768 (0.47x -> 0.33x float); the ViT-S w8a8 went from
  0.59x / 0.76x (quanto's own path) to 0.43x / 0.52x in a side-by-side probe. (2) `torch.compile` of the quantized
  model (dynamo traces quanto's weight tensors and the fused layer): inductor fuses the per-layer
  quantize (div, round, clamp, cast) and rescale passes, which in eager are ~25 % of the w8a8 ViT-S time at batch
  32 (int8 matmuls 349 ms, everything else 407 ms vs 227 ms for float). Compile time: 15-35 s per model and
  batch size on this machine.
- `torch._int_mm` itself is 3-5x faster than float32 mm from width 192 up (part 2a); quanto w8 (weight-only)
  dequantizes every call and is never faster on CPU; bitsandbytes int8 quantizes activations per row on the fly
  and is slower than quanto w8a8 everywhere (0.61x at ViT-S batch 32). quanto's QConv2d has no int8 CPU kernel
  (it dequantizes): a ResNet sidekick is 1.3-1.8x slower quantized, a small share of a duo's time.
- Weight bytes: quanto int8 0.286x (tiny ViT), 0.255x (ViT-S); bitsandbytes 0.302x / 0.462x on the tiny ViT / duo
  (convolutions stay float) and 0.256x / 0.257x on the ViT-S and its all-ViT duo. The uncertainty survives int8
  everywhere (Spearman >= 0.997, |delta ECE| <= 0.3 pt).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
import warnings

import torch
from torch import nn
from transformers import AutoModelForImageClassification

import hf_uq  # noqa: F401  (Auto-class and quantizer registrations)
from hf_uq import DuoForImageClassification, DuoImageProcessor
from hf_uq.data import load_digits_benchmark
from hf_uq.evaluation import compare_latency, iter_batches, quantization_drift, weight_bytes
from hf_uq.evaluation.zoo_training import RECIPE_FILE, is_cached
from hf_uq.models.tiny import tiny_cnn, tiny_cnn_image_processor, tiny_vit, tiny_vit_image_processor
from hf_uq.quantization import QuantizationSkipWarning, is_backend_available, quantize
from hf_uq.training import fit_classifier

VARIANTS = ("float", "quanto w8", "quanto w8a8", "bnb int8", "float cc", "w8a8 cc")
#: Compiled variant -> its eager twin (whose drift it shares).
COMPILED = {"float cc": "float", "w8a8 cc": "quanto w8a8"}


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def make_variants(model: nn.Module, calibration, processor, compile_: bool = False) -> dict[str, nn.Module]:
    """The float model, its three quantized versions (bitsandbytes only when installed) and the compiled pair."""
    variants = {"float": model}
    variants["quanto w8"] = quantize(model, "quanto", "int8")
    variants["quanto w8a8"] = quantize(model, "quanto", "int8", "int8", calibration_dataset=calibration,
                                       image_processor=processor, max_calibration_batches=8)
    if is_backend_available("bitsandbytes"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", QuantizationSkipWarning)  # convolutions stay float: counted in bytes
            variants["bnb int8"] = quantize(model, "bitsandbytes", "int8")
    if compile_:  # fresh copies (a quantized model cannot be deep-copied; quantizing again gives the same model)
        variants["float cc"] = compiled(copy.deepcopy(model))
        variants["w8a8 cc"] = compiled(quantize(model, "quanto", "int8", "int8", calibration_dataset=calibration,
                                                image_processor=processor, max_calibration_batches=8))
    return variants


def compiled(model: nn.Module) -> nn.Module:
    """`model` with its forward compiled in place (`nn.Module.compile`, default inductor backend)."""
    model.compile()
    return model


def batch_of(inputs: dict[str, torch.Tensor], size: int) -> dict[str, torch.Tensor]:
    index = torch.arange(size) % len(inputs["pixel_values"])
    return {k: v[index].contiguous() for k, v in inputs.items()}


def latency_ratios(variants, inputs, repeats: dict[int, int]) -> dict[int, dict[str, float]]:
    """P50 latency of each variant over the eager float model's, all timed interleaved, for each batch size in
    `repeats` (batch size -> timed rounds)."""
    out = {}
    for size, rounds in repeats.items():
        stats = compare_latency(variants, batch_of(inputs, size), repeats=rounds, threads=1)
        out[size] = {name: s.p50 / stats["float"].p50 for name, s in stats.items()}
        out[size]["float_ms"] = 1e3 * stats["float"].p50
        if "float cc" in stats:
            out[size]["cc/cc"] = stats["w8a8 cc"].p50 / stats["float cc"].p50
    return out


def compiled_gap(variants, inputs) -> float:
    """Max |logit difference| between each compiled model and its eager twin on `inputs` (0.0 without compile)."""
    gap = 0.0
    with torch.inference_mode():
        for name, eager in COMPILED.items():
            if name in variants:
                diff = variants[name](**inputs).logits - variants[eager](**inputs).logits
                gap = max(gap, float(diff.abs().max()))
    return gap


def compare_variants(name: str, model: nn.Module, processor, benchmark, repeats: dict[int, int],
                     compile_: bool) -> list[dict]:
    """Drift (`quantization_drift`) and interleaved latency ratios (at batch 1 and 32, `repeats` rounds each) of
    every variant of one trained model."""
    variants = make_variants(model, benchmark["validation"], processor, compile_)
    inputs = next(iter_batches(benchmark["test"], processor, batch_size=32))
    inputs.pop("labels")
    timing = latency_ratios(variants, inputs, repeats)
    gap = compiled_gap(variants, inputs)
    drifts = {}
    rows = []
    for variant, quantized in variants.items():
        if variant not in COMPILED:
            drifts[variant] = quantization_drift(model, quantized, benchmark, image_processor=processor,
                                                 latency_batch_sizes=())
        rows.append({"model": name, "variant": variant, "drift": drifts[COMPILED.get(variant, variant)],
                     "lat1": timing[1][variant], "lat32": timing[32][variant],
                     "cc": (timing[1].get("cc/cc"), timing[32].get("cc/cc")) if variant == "w8a8 cc" else None,
                     "float_ms": (timing[1]["float_ms"], timing[32]["float_ms"]), "gap": gap})
    return rows


def train_duo(args, benchmark, vit, vit_processor, threads: int, **cnn_args) -> tuple[nn.Module, DuoImageProcessor]:
    """A duo of the trained `vit` and a freshly trained `tiny_cnn(**cnn_args)` sidekick, temperatures fit."""
    small = tiny_cnn(seed=args.seed + 1, **cnn_args)
    small_processor = tiny_cnn_image_processor(small)
    small = fit_classifier(small, benchmark, small_processor, epochs=args.epochs, seed=args.seed + 1,
                           num_threads=threads, verbose=False)
    duo = DuoForImageClassification.from_members(vit, small).eval()
    duo_processor = DuoImageProcessor.from_members(vit_processor, small_processor)
    duo.fit_temperatures(list(iter_batches(benchmark["validation"], duo_processor, batch_size=128)))
    return duo, duo_processor


def part_one(args, benchmark) -> list[dict]:
    start = time.perf_counter()
    vit_processor = tiny_vit_image_processor()
    vit = fit_classifier(tiny_vit(seed=args.seed), benchmark, vit_processor, epochs=args.epochs, seed=args.seed,
                         num_threads=1, verbose=False)
    duo, duo_processor = train_duo(args, benchmark, vit, vit_processor, 1, channels=(8, 16, 32, 32))
    print(f"trained the tiny ViT and its sidekick ({args.epochs:g} epochs each) in {time.perf_counter() - start:.0f} s")
    repeats = {1: args.repeats, 32: args.repeats}
    return (compare_variants("ViT", vit.eval(), vit_processor, benchmark, repeats, args.compile)
            + compare_variants("duo", duo, duo_processor, benchmark, repeats, args.compile))


#: Part 3's models: a ViT-S-shaped classifier and, as its duo's sidekick, a ViT-Tiny-width one with half the blocks
#: (1/8 of its FLOPs, inside the Asymmetric Duos' 5-20 % range). Every linear layer of both is quantizable, so the
#: duo's bitsandbytes bytes are not held up by float convolutions.
SMALL_MODELS = {
    "vit_s": {"hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 6, "intermediate_size": 1536},
    "sidekick": {"hidden_size": 192, "num_hidden_layers": 6, "num_attention_heads": 3, "intermediate_size": 768},
}


def trained_small_vit(name: str, args, benchmark, processor) -> nn.Module:
    """Part 3's model `name` trained on the 32x32 digits, loaded from `args.cache_dir` when a folder there was
    trained with the same recipe (`hf_uq.evaluation.zoo_training.is_cached`), else trained and saved there."""
    recipe = {"kind": "vit", "image_size": 32, **SMALL_MODELS[name], "epochs": args.small_epochs,
              "lr": args.small_lr, "seed": args.seed}
    path = os.path.join(args.cache_dir, f"{name}-seed{args.seed}")
    if is_cached(path, recipe):
        print(f"{name}: reusing {path}")
        return AutoModelForImageClassification.from_pretrained(path).eval()
    start = time.perf_counter()
    model = fit_classifier(tiny_vit(image_size=32, seed=args.seed, **SMALL_MODELS[name]), benchmark, processor,
                           epochs=args.small_epochs, learning_rate=args.small_lr, seed=args.seed,
                           num_threads=args.train_threads, verbose=False).eval()
    model.save_pretrained(path)
    with open(os.path.join(path, RECIPE_FILE), "w", encoding="utf-8") as handle:
        json.dump(recipe, handle, sort_keys=True)
    print(f"{name}: trained {args.small_epochs:g} epochs in {time.perf_counter() - start:.0f} s, saved to {path}")
    return model


def part_three(args, benchmark) -> list[dict]:
    """ViT-S shape (384 wide, 6 heads, MLP 1536, 12 layers, 32x32 inputs, patch 4: 65 tokens) and its duo with a
    192-wide, 6-block ViT sidekick."""
    processor = tiny_vit_image_processor(32)
    vit_s = trained_small_vit("vit_s", args, benchmark, processor)
    sidekick = trained_small_vit("sidekick", args, benchmark, processor)
    duo = DuoForImageClassification.from_members(vit_s, sidekick).eval()
    duo_processor = DuoImageProcessor.from_members(processor, processor)
    duo.fit_temperatures(list(iter_batches(benchmark["validation"], duo_processor, batch_size=128)))
    print(f"duo-S temperatures {[round(t, 3) for t in duo.config.temperatures]}")
    repeats = {1: args.repeats, 32: max(6, args.repeats // 4)}  # a batch-32 ViT-S forward takes ~1 s
    return (compare_variants("ViT-S", vit_s, processor, benchmark, repeats, args.compile)
            + compare_variants("duo-S", duo, duo_processor, benchmark, repeats, args.compile))


def print_rows(title: str, rows) -> None:
    print(f"\n{title} ({load()})")
    head = (f"{'model':<6}{'variant':<12}{'bytes':>7}{'lat@1':>7}{'lat@32':>8}{'cc/cc@1,32':>12}{'dECE pt':>9}"
            f"{'dNLL':>8}{'dAUROCn':>9}{'dAUROCf':>9}{'Spearman':>9}{'agree':>7}  targets")
    print(head)
    for row in rows:
        d = row["drift"]
        checks = []
        if row["variant"] in ("quanto w8", "quanto w8a8", "bnb int8"):
            checks.append(f"bytes<=0.3 {'OK' if d['weight_bytes_ratio'] <= 0.3 else 'MISS'}")
            ok = d["delta_ece"] <= 0.005 and d["spearman"] >= 0.95
            checks.append(f"UQ {'OK' if ok else 'MISS'}")
        if row["variant"] in ("quanto w8a8", "w8a8 cc"):
            checks.append(f"lat<=0.5 {'OK' if max(row['lat1'], row['lat32']) <= 0.5 else 'MISS'}")
        cc = "" if row["cc"] is None else f"{row['cc'][0]:.2f},{row['cc'][1]:.2f}"
        if row["cc"] is not None:
            checks.append(f"cc/cc<=0.5 {'OK' if max(row['cc']) <= 0.5 else 'MISS'}")
        print(f"{row['model']:<6}{row['variant']:<12}{d['weight_bytes_ratio']:>7.3f}{row['lat1']:>7.2f}"
              f"{row['lat32']:>8.2f}{cc:>12}{100 * d['delta_ece']:>+9.2f}{d['delta_nll']:>+8.4f}"
              f"{d['delta_ood_auroc/ood_near']:>+9.4f}{d['delta_ood_auroc/ood_far']:>+9.4f}{d['spearman']:>9.4f}"
              f"{d['top1_agreement']:>7.3f}  {', '.join(checks)}")
    for row in rows:
        if row["variant"] == "float":
            ref = row["drift"]["reference"]
            print(f"{row['model']} float: accuracy {ref['accuracy']:.4f}, ECE {100 * ref['ece']:.2f} pt, "
                  f"NLL {ref['nll']:.4f}, AUROC near {ref['ood_auroc/ood_near']:.4f} far "
                  f"{ref['ood_auroc/ood_far']:.4f}; P50 {row['float_ms'][0]:.2f} ms @1, {row['float_ms'][1]:.2f} ms "
                  f"@32; compiled vs eager max |delta logit| {row['gap']:.1e}")


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
    print(f"\nPart 2a: kernel ceiling, torch._int_mm (int8) vs float32 mm, 1 thread (rows = batch x tokens; {load()})")
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


def _unfused(model: nn.Module) -> nn.Module:
    """optimum-quanto's own w8a8 path: the fused layers turned back into `QLinear` with its input hook."""
    from optimum.quanto.nn import QLinear

    from hf_uq.quantization.quanto_layers import FusedW8A8QLinear

    for module in model.modules():
        if type(module) is FusedW8A8QLinear:
            module.__class__ = QLinear
            module._quantize_hooks["input"] = module.register_forward_pre_hook(module.quantize_input)
    return model


def one_layer(shapes, repeats) -> None:
    names = ("float", "quanto w8", "w8a8 quanto", "quanto w8a8", "bnb int8")
    print(f"\nPart 2b: one nn.Linear, P50 ms (ratio to float), 1 thread; 'w8a8 quanto' is optimum-quanto's own "
          f"QLinear path, 'quanto w8a8' hf_uq's fused one ({load()})")
    print(f"{'rows':>6}{'K=N':>6}" + "".join(f"{v:>20}" for v in names))
    for rows, width in shapes:
        layer = _OneLayer(width).eval()
        x = torch.randn(rows, width)
        variants = make_variants(layer, [x[None]], None)  # calibration batches: [(1, rows, width)]
        variants["w8a8 quanto"] = _unfused(quantize(layer, "quanto", "int8", "int8", calibration_dataset=[x[None]]))
        variants = {name: variants[name] for name in names if name in variants}
        stats = compare_latency(variants, x[None], repeats=repeats, threads=1)
        base = stats["float"].p50
        cells = "".join(f"{1e3 * s.p50:>11.3f} ({s.p50 / base:>4.2f}x)" for s in stats.values())
        print(f"{rows:>6}{width:>6}{cells}")


def vit_scaling(widths, repeats) -> None:
    names = ("quanto w8", "quanto w8a8", "bnb int8")
    print(f"\nPart 2c: 4-layer ViTs (16x16 inputs, patch 4: 17 tokens), random weights; P50 ratio to float, 1 thread "
          f"({load()})")
    print(f"{'width':>6}{'MB fp32':>9}{'batch':>6}{'float ms':>10}" + "".join(f"{v:>13}" for v in names))
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
            cells = "".join(f"{stats[v].p50 / base:>13.2f}" for v in names if v in stats)
            print(f"{width:>6}{weight_bytes(model) / 2**20:>9.1f}{size:>6}{1e3 * base:>10.2f}{cells}")
        del variants, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=float, default=30, help="training epochs of each tiny digits model")
    parser.add_argument("--repeats", type=int, default=30, help="timed forwards per variant and batch size")
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 192, 384, 768])
    parser.add_argument("--no-tiny", action="store_true", help="skip part 1")
    parser.add_argument("--no-scaling", action="store_true", help="skip part 2")
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="no torch.compile variants")
    parser.add_argument("--small-epochs", type=float, default=30,
                        help="epochs of part 3's ViT-S-shaped model and sidekick (0 skips part 3)")
    parser.add_argument("--small-lr", type=float, default=5e-4, help="peak learning rate of part 3's models")
    parser.add_argument("--cache-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "hf_uq",
                                                             "bench_quantization"),
                        help="where part 3's trained models are kept and reused (keyed by their recipe)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.train_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = time.perf_counter()
    print(load())
    benchmark = load_digits_benchmark(seed=args.seed)
    if not args.no_tiny:
        print_rows("Part 1: tiny models trained on digits (test 433, ood_near 354, ood_far 433); ratios to eager "
                   "float, 1 thread", part_one(args, benchmark))
    if not args.no_scaling:
        kernel_ceiling(args.widths, (17, 544), max(10, args.repeats // 2))
        one_layer([(17, 64), (544, 64), (544, 768)], args.repeats)
        vit_scaling(args.widths, args.repeats)
    if args.small_epochs:
        print_rows("Part 3: ViT-S shape (384 wide, 12 layers, 65 tokens) trained on digits at 32x32, and its duo; "
                   "ratios to eager float, 1 thread", part_three(args, benchmark))
    print(f"\ntotal {time.perf_counter() - start:.0f} s ({load()})")


if __name__ == "__main__":
    main()
