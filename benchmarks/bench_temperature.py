"""Temperature fitting: hf_uq's fit side by side with a plain torch L-BFGS loop, in one run.

    python benchmarks/bench_temperature.py                          # N = 50,000, C = 1,000
    python benchmarks/bench_temperature.py --n 5000 --classes 100   # a quick run
    python benchmarks/bench_temperature.py --threads 1              # steadier on a busy machine

Data: two members ("large" and "small") with float32 logits of shape (N, C): a shared noise
component (correlation 0.5), per-member independent noise and a per-sample signal on a true
class. Labels are sampled from softmax(z_large / 1.5 + z_small / 2.5), so the model is
calibrated at T = (1.5, 2.5) and the optimum is interior.

Baseline: the Asymmetric Duos recipe written from its description: the temperatures are
torch parameters (initialized at 1), ``torch.optim.LBFGS(lr=0.01, max_iter=50)`` and a closure
computing the cross-entropy of ``sum_k z_k / T_k``; one ``step`` call. Both methods' NLLs
are then measured by the same float64 reference evaluation. The ratios are baseline time /
hf_uq time (> 1 means hf_uq is faster), in wall-clock seconds and in CPU seconds (the CPU
figure moves less when other jobs share the machine). K = 1 (temperature scaling) as well.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from hf_uq.calibration import fit_temperatures_result

TRUE_TEMPERATURES = (1.5, 2.5)


def make_data(n: int, c: int, seed: int = 0, noise: float = 2.0, corr: float = 0.5):
    """(z_large, z_small, labels); float32 logits, labels drawn by the Gumbel-max trick."""
    rng = np.random.default_rng(seed)
    true = rng.integers(0, c, n)
    rows = np.arange(n)
    difficulty = rng.uniform(0.5, 1.5, n).astype(np.float32)
    shared = rng.standard_normal((n, c), dtype=np.float32)
    shared *= np.float32(noise * np.sqrt(corr))
    members = []
    for signal in (9.0, 6.0):  # the large model sees the class more clearly
        z = rng.standard_normal((n, c), dtype=np.float32)
        z *= np.float32(noise * np.sqrt(1.0 - corr))
        z += shared
        z[rows, true] += np.float32(signal) * difficulty
        members.append(z)
    del shared
    labels = np.empty(n, dtype=np.int64)
    t_large, t_small = (np.float32(t) for t in TRUE_TEMPERATURES)
    for r0 in range(0, n, 2048):
        rs = slice(r0, r0 + 2048)
        fused = members[0][rs] / t_large + members[1][rs] / t_small
        u = rng.random(fused.shape, dtype=np.float32)
        np.maximum(u, np.float32(1e-30), out=u)
        labels[rs] = np.argmax(fused - np.log(-np.log(u)), axis=1)
    return members[0], members[1], labels


def fit_torch_lbfgs(members, labels, lr: float = 0.01, max_iter: int = 50):
    """The plain loop: temperatures as parameters, LBFGS, cross-entropy of the fusion."""
    zs = [torch.from_numpy(z) for z in members]
    y = torch.from_numpy(labels)
    temps = [torch.nn.Parameter(torch.ones(1)) for _ in zs]
    optimizer = torch.optim.LBFGS(temps, lr=lr, max_iter=max_iter)
    calls = 0

    def closure():
        nonlocal calls
        calls += 1
        optimizer.zero_grad()
        fused = zs[0] / temps[0]
        for z, t in zip(zs[1:], temps[1:], strict=True):
            fused = fused + z / t
        loss = torch.nn.functional.cross_entropy(fused, y)
        loss.backward()
        return loss

    optimizer.step(closure)
    return [float(t.detach()) for t in temps], calls


def reference_nll(members, labels, temperatures) -> float:
    """NLL of softmax(sum_k z_k / T_k) with float64 log-sum-exp, chunked (any sign of T)."""
    y = torch.from_numpy(labels)
    total = 0.0
    for r0 in range(0, len(labels), 4096):
        fused = sum(
            torch.from_numpy(z[r0 : r0 + 4096]).double() / t
            for z, t in zip(members, temperatures, strict=True)
        )
        picked = fused.gather(1, y[r0 : r0 + 4096, None])[:, 0]
        total += float((torch.logsumexp(fused, dim=1) - picked).sum())
    return total / len(labels)


def timed(fn, *args, repeat: int = 1, **kwargs):
    """(best wall seconds, CPU seconds of that run, result) over ``repeat`` runs."""
    best, cpu, result = float("inf"), float("nan"), None
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = fn(*args, **kwargs)
        wall = time.perf_counter() - start
        if wall < best:
            best, cpu = wall, time.process_time() - start_cpu
    return best, cpu, result


def run(members, labels, repeat: int, baseline: bool) -> None:
    k = len(members)
    name = "Asymmetric Duo, K = 2" if k == 2 else "temperature scaling, K = 1"
    print(f"\n{name}")
    t_hf, cpu_hf, fit = timed(fit_temperatures_result, members, labels, repeat=repeat)
    nll_hf = reference_nll(members, labels, fit.temperatures)  # one yardstick for both
    header = f"  {'method':<36}{'wall [s]':>9}{'cpu [s]':>9}{'NLL':>11}{'passes':>8}  temperatures"
    print(header)
    print("  " + "-" * (len(header) + 8))
    temps_hf = ", ".join(f"{t:.4f}" for t in fit.temperatures)
    label = f"hf_uq fit_temperatures (best of {repeat})"
    print(
        f"  {label:<36}{t_hf:>9.3f}{cpu_hf:>9.3f}{nll_hf:>11.6f}{fit.n_evals:>8}  ({temps_hf})"
        f"  converged={fit.converged}, {fit.n_iter} L-BFGS-B iterations"
    )
    print(f"  {'untempered fusion (all T = 1)':<36}{'':>18}{fit.nll_before:>11.6f}")
    if not baseline:
        return
    t_torch, cpu_torch, (temps_torch, calls) = timed(fit_torch_lbfgs, members, labels)
    nll_torch = reference_nll(members, labels, temps_torch)
    temps_txt = ", ".join(f"{t:.4f}" for t in temps_torch)
    print(
        f"  {'torch LBFGS(lr=0.01, max_iter=50)':<36}{t_torch:>9.3f}{cpu_torch:>9.3f}"
        f"{nll_torch:>11.6f}{calls:>8}  ({temps_txt})"
    )
    print(
        f"  speed ratio (torch / hf_uq): wall {t_torch / t_hf:.1f}x, cpu "
        f"{cpu_torch / cpu_hf:.1f}x; NLL gap (torch - hf_uq): {nll_torch - nll_hf:+.6f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000, help="validation samples")
    parser.add_argument("--classes", type=int, default=1_000, help="number of classes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="hf_uq runs (best is shown)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the torch loop")
    parser.add_argument(
        "--threads", type=int, default=None, help="threads for both (default: torch's setting)"
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)  # hf_uq follows torch.get_num_threads()

    start = time.perf_counter()
    z_large, z_small, labels = make_data(args.n, args.classes, args.seed)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"N = {args.n:,}, C = {args.classes:,}, float32 logits; labels sampled at "
        f"T = {TRUE_TEMPERATURES} (data made in {time.perf_counter() - start:.1f} s)\n"
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{os.cpu_count()} CPUs, load average {load}"
    )
    acc = [(z.argmax(1) == labels).mean() for z in (z_large, z_small)]
    print(f"accuracy: large {acc[0]:.3f}, small {acc[1]:.3f}")
    run([z_large, z_small], labels, args.repeat, not args.no_baseline)
    run([z_large], labels, args.repeat, not args.no_baseline)


if __name__ == "__main__":
    main()
