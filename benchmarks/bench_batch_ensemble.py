"""BatchEnsembleViT vs a deep ensemble and vs a single ViT: parameters, weight and peak memory, FLOPs and
latency, measured side by side in one run.

    python benchmarks/bench_batch_ensemble.py                 # hidden 192, 12 blocks, M = 4, batch 32, 1 thread
    python benchmarks/bench_batch_ensemble.py --layers 6 --repeats 30
    python benchmarks/bench_batch_ensemble.py --device cuda --repeats 50   # on a GPU (CUDA-synchronized timing)

Models (random weights: cost does not depend on them): a ViT-Tiny-shaped `ViTForImageClassification` (hidden
192, 3 heads, MLP 768, patch 4 on 32x32 inputs: 65 tokens, 10 classes) with `--layers` blocks;

- **single**: that ViT;
- **deep ensemble**: `DeepEnsembleForImageClassification` of 4 such ViTs (members run one after the other);
- **BE full**: `BatchEnsembleViTForImageClassification.from_vit(single, 4)`, every block and the head ensembled;
- **BE latent**: the same with `ensemble_layers=[-2, -1]`: the first L - 2 blocks run once, the last two (and the
  head) per member, costing about `1 + 3 * 2 / L` single forwards;
- **ViT on 4x batch** (diagnostic): the single ViT on the batch tiled 4 times, i.e. one plain batched pass
  over M * B images: what BE full costs without its fast weights, the floor of any one-pass ensemble.

Targets (issue 4): BE full latency <= 0.9x the deep ensemble's and weight memory <= 0.3x; BE latent latency
<= (1 + 3 * 2 / L) x single + 10 %. Latencies are P50s of `compare_latency` (round-robin, interleaved, so that
machine noise hits every model alike); peak memory is `peak_memory` (weights + activations of one forward).
"""

from __future__ import annotations

import argparse
import os

import torch
from transformers import ViTConfig, ViTForImageClassification

from hf_uq.evaluation import (
    compare_latency,
    count_flops,
    count_parameters,
    peak_memory,
    weight_bytes,
)
from hf_uq.models.batch_ensemble_vit import (
    BatchEnsembleViTConfig,
    BatchEnsembleViTForImageClassification,
)
from hf_uq.models.deep_ensemble import DeepEnsembleForImageClassification

MIB = 2**20


class TiledViT(torch.nn.Module):
    """The plain ViT run once on the batch repeated `members` times (the diagnostic "ViT on 4x batch")."""

    def __init__(self, vit: ViTForImageClassification, members: int):
        super().__init__()
        self.vit, self.members = vit, members

    def forward(self, pixel_values: torch.Tensor):
        return self.vit(pixel_values=pixel_values.repeat(self.members, 1, 1, 1))


def vit_config(layers: int, **overrides) -> dict:
    return {
        "hidden_size": 192, "num_hidden_layers": layers, "num_attention_heads": 3, "intermediate_size": 768,
        "image_size": 32, "patch_size": 4, "num_labels": 10, **overrides,
    }


def build(args: argparse.Namespace) -> dict[str, torch.nn.Module]:
    def vit(seed: int) -> ViTForImageClassification:
        torch.manual_seed(seed)
        return ViTForImageClassification(ViTConfig(**vit_config(args.layers))).eval()

    single = vit(0)
    torch.manual_seed(0)
    models = {
        "single": single,
        "deep ensemble": DeepEnsembleForImageClassification.from_members([vit(i) for i in range(args.members)]),
        "BE full": BatchEnsembleViTForImageClassification.from_vit(single, args.members),
        "BE latent": BatchEnsembleViTForImageClassification.from_vit(single, args.members, ensemble_layers=[-2, -1]),
    }
    if not args.no_diagnostic:
        models[f"ViT on {args.members}x batch"] = TiledViT(single, args.members)
    return {name: model.eval() for name, model in models.items()}


def vit_base_ratio(members: int) -> float:
    """Parameters of a ViT-Base-sized BatchEnsemble (hidden 768, 12 blocks, every block) over ViT-Base."""
    with torch.device("meta"):
        base = ViTForImageClassification(ViTConfig(num_labels=1000))
        be = BatchEnsembleViTForImageClassification(BatchEnsembleViTConfig(num_labels=1000, ensemble_size=members))
    return count_parameters(be) / count_parameters(base)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12, help="ViT blocks L (default 12)")
    parser.add_argument("--members", type=int, default=4, help="ensemble size M (default 4)")
    parser.add_argument("--batch", type=int, default=32, help="images per forward (default 32)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads while timing (default 1)")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds (default 15)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    parser.add_argument("--no-diagnostic", action="store_true", help="skip the 'ViT on Mx batch' reference")
    parser.add_argument("--device", default="cpu", help="where the models run, e.g. cuda (default cpu)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    m, layers = args.members, args.layers
    print(f"ViT hidden 192, {layers} blocks, 65 tokens; M = {m}; batch {args.batch}; {args.device}; "
          f"{args.threads} thread(s); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")

    models = {name: model.to(args.device) for name, model in build(args).items()}
    pixel_values = torch.randn(args.batch, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    params = {name: count_parameters(model) for name, model in models.items()}
    weights = {name: weight_bytes(model) for name, model in models.items()}
    flops = {name: count_flops(model, pixel_values) for name, model in models.items()}
    memory = {name: peak_memory(model, pixel_values) for name, model in models.items()}
    latency = compare_latency(models, pixel_values, warmup=args.warmup, repeats=args.repeats, threads=args.threads)

    print(f"\n{'model':18s} {'params':>10s} {'x single':>9s} {'weights MiB':>12s} {'peak MiB':>9s} "
          f"{'activ. MiB':>11s} {'GFLOPs':>8s} {'x single':>9s} {'P50 ms':>9s} {'min ms':>8s} {'x single':>9s}")
    for name in models:
        print(f"{name:18s} {params[name]:>10,d} {params[name] / params['single']:>9.3f} "
              f"{weights[name] / MIB:>12.1f} {memory[name].total_peak / MIB:>9.1f} "
              f"{memory[name].activations_peak / MIB:>11.1f} {flops[name] / 1e9:>8.2f} "
              f"{flops[name] / flops['single']:>9.3f} {latency[name].p50 * 1e3:>9.1f} {latency[name].min * 1e3:>8.1f} "
              f"{latency[name].p50 / latency['single'].p50:>9.3f}")

    be, de, latent = "BE full", "deep ensemble", "BE latent"
    print(f"\nparameters, M = {m}: BE full {params[be] / params['single']:.4f}x single, BE latent "
          f"{params[latent] / params['single']:.4f}x; a ViT-Base-sized BE full (hidden 768): "
          f"{vit_base_ratio(m):.4f}x (target <= 1.02x)")
    ratio = latency[be].p50 / latency[de].p50
    print(f"BE full vs deep ensemble: latency {ratio:.3f}x (min {latency[be].min / latency[de].min:.3f}x) "
          f"[target <= 0.9: {verdict(ratio <= 0.9)}]; weight memory {weights[be] / weights[de]:.3f}x "
          f"[target <= 0.3: {verdict(weights[be] / weights[de] <= 0.3)}]; peak memory "
          f"{memory[be].total_peak / memory[de].total_peak:.3f}x; FLOPs {flops[be] / flops[de]:.3f}x")
    bound = (1 + (m - 1) * 2 / layers) * 1.1
    ratio = latency[latent].p50 / latency["single"].p50
    print(f"BE latent (last 2 of {layers} blocks) vs single: latency {ratio:.3f}x (min "
          f"{latency[latent].min / latency['single'].min:.3f}x) [target <= (1 + {m - 1}*2/{layers}) x 1.1 = "
          f"{bound:.3f}: {verdict(ratio <= bound)}]; FLOPs {flops[latent] / flops['single']:.3f}x")
    tiled = f"ViT on {m}x batch"
    if tiled in latency:
        print(f"diagnostic: one plain ViT pass over {m}x the batch takes {latency[tiled].p50 / latency[de].p50:.3f}x "
              f"the deep ensemble's time ({m} passes of batch {args.batch}); BE full takes "
              f"{latency[be].p50 / latency[tiled].p50:.3f}x that plain pass (the cost of its fast weights)")


if __name__ == "__main__":
    main()
