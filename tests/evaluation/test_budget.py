"""Budget measurements: hand-counted FLOPs, unique parameters and bytes, latency structure, peak memory.

No assertion here bounds wall-clock time: latencies are only checked for structure and ordering.
"""

import math

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from transformers import ViTConfig, ViTForImageClassification

from hf_uq.evaluation import (
    LatencyStats,
    MemoryStats,
    budget_report,
    compare_budgets,
    compare_latency,
    count_flops,
    count_parameters,
    flops_per_image,
    measure_latency,
    peak_memory,
    relative_budget,
    weight_bytes,
)
from hf_uq.models.tiny import tiny_cnn, tiny_vit

# ------------------------------------------------------------------------------------------ fixtures

VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
           image_size=16, patch_size=4, num_labels=8)


def _vit(**overrides):
    torch.manual_seed(0)
    return ViTForImageClassification(ViTConfig(**{**VIT, **overrides}))


def _vit_hand_flops(batch, c=3, d=VIT["hidden_size"], i=VIT["intermediate_size"],
                    layers=VIT["num_hidden_layers"], p=VIT["patch_size"], labels=VIT["num_labels"]):
    """2 FLOPs per multiply-add; bias adds, layernorms, GELU, softmax, scaling and residuals are 0.

    Returns (total, attention matmuls only).
    """
    patches = (VIT["image_size"] // p) ** 2
    t = patches + 1  # tokens: patches + CLS
    patch_embedding = 2 * batch * patches * d * (c * p * p)  # 4x4 stride-4 conv = one matmul per patch
    qkv = 3 * 2 * batch * t * d * d
    attn_out = 2 * batch * t * d * d
    mlp = 2 * batch * t * d * i + 2 * batch * t * i * d
    # q @ k^T and softmax(.) @ v over all heads: heads * head_dim = d
    attention = 2 * batch * t * t * d + 2 * batch * t * t * d
    classifier = 2 * batch * d * labels  # on the CLS token only
    total = patch_embedding + layers * (qkv + attn_out + mlp + attention) + classifier
    return total, layers * attention


def _stack(width, depth=3, out=None):
    layers = []
    for k in range(depth):
        layers += [nn.Linear(width, out if (out and k == depth - 1) else width), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


# ------------------------------------------------------------------------------------------ FLOPs


def test_linear_stack_flops_match_hand_count():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    assert count_flops(model, x) == 2 * 5 * (8 * 16 + 16 * 4)
    assert flops_per_image(model, x) == 2 * (8 * 16 + 16 * 4)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tiny_vit_flops_match_hand_count(attn):
    model = _vit()
    model.set_attn_implementation(attn)
    assert model.config._attn_implementation == attn
    x = torch.randn(2, 3, 16, 16)
    hand, _ = _vit_hand_flops(batch=2)
    flops = count_flops(model, x)
    # Exact: FlopCounterMode counts exactly the matmuls and the conv of the hand count, and nothing else
    # (layernorm, GELU, softmax, the 1/sqrt(d) scaling, bias and residual adds cost 0 by its convention).
    assert abs(flops - hand) / hand < 0.01
    assert flops == hand
    assert flops_per_image(model, x) == hand // 2


def test_stock_counter_misses_cpu_sdpa_which_we_add():
    """Why the extra formula exists: on CPU, SDPA dispatches to an op the stock registry lacks."""
    model = _vit().eval()
    x = torch.randn(2, 3, 16, 16)
    hand, attention = _vit_hand_flops(batch=2)
    with torch.no_grad(), FlopCounterMode(display=False) as stock:
        model(x)
    assert stock.get_total_flops() in (hand, hand - attention)  # equal once torch registers it itself
    assert count_flops(model, x) == hand


def test_flops_per_image_is_batch_independent_and_dict_inputs_work():
    model = tiny_cnn()
    one = flops_per_image(model, torch.randn(1, 3, 16, 16))
    assert one > 0
    assert flops_per_image(model, {"pixel_values": torch.randn(3, 3, 16, 16)}) == one


def test_uncounted_matmul_like_op_warns():
    lib = torch.library.Library("hfuq_budget_test", "FRAGMENT")  # noqa: F841 (kept alive for the op)
    torch.library.define("hfuq_budget_test::packed_mm", "(Tensor a, Tensor b) -> Tensor", lib=lib)
    torch.library.impl("hfuq_budget_test::packed_mm", "default", lambda a, b: a @ b.t(), lib=lib)

    class Packed(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(4, 8))

        def forward(self, x):
            return torch.ops.hfuq_budget_test.packed_mm(x, self.weight)

    with pytest.warns(RuntimeWarning, match="packed_mm"):
        assert count_flops(Packed(), torch.randn(2, 8)) == 0


# ------------------------------------------------------------------------------------------ parameters / bytes


def test_tied_weights_count_once():
    model = nn.Sequential(nn.Linear(6, 6, bias=False), nn.Linear(6, 6, bias=False))
    model[1].weight = model[0].weight  # same Parameter object
    assert count_parameters(model) == 36
    assert weight_bytes(model) == 36 * 4

    shared = nn.Sequential(nn.Linear(6, 6, bias=False), nn.Linear(6, 6, bias=False))
    shared[1].weight = nn.Parameter(shared[0].weight.data)  # distinct Parameters, one storage
    assert count_parameters(shared) == 36
    assert weight_bytes(shared) == 36 * 4


def test_count_parameters_plain_models():
    for model in (_vit(), tiny_cnn()):
        assert count_parameters(model) == sum(p.numel() for p in model.parameters())


def test_weight_bytes_float_model_and_bf16_copy():
    for model in (_vit(), tiny_cnn()):
        tensors = [*model.parameters(), *model.buffers()]
        assert weight_bytes(model) == sum(t.numel() * t.element_size() for t in tensors)
    vit = _vit()
    assert not list(vit.buffers())  # so that every byte is a float parameter
    assert weight_bytes(vit.to(torch.bfloat16)) * 2 == weight_bytes(_vit())


class _PackedInt8(torch.Tensor):
    """Minimal traceable wrapper subclass: logical float weight held as int8 data + per-row scales."""

    @staticmethod
    def __new__(cls, data, scale):
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=torch.float32, device=data.device)

    def __init__(self, data, scale):
        self._data, self._scale = data, scale

    def __tensor_flatten__(self):
        return ["_data", "_scale"], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return _PackedInt8(inner["_data"], inner["_scale"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.detach.default:  # what nn.Parameter(...) calls
            return _PackedInt8(args[0]._data, args[0]._scale)
        raise NotImplementedError(func)


def test_weight_bytes_sees_through_tensor_subclasses():
    model = nn.Linear(16, 8)
    packed = _PackedInt8(torch.zeros(8, 16, dtype=torch.int8), torch.ones(8, 1))
    model.weight = nn.Parameter(packed, requires_grad=False)
    assert weight_bytes(model) == 8 * 16 * 1 + 8 * 4 + 8 * 4  # int8 data + fp32 scales + fp32 bias
    assert count_parameters(model) == 8 * 16 + 8  # logical shape


def test_weight_bytes_quanto_int8():
    quanto = pytest.importorskip("optimum.quanto")
    model = tiny_vit().eval()
    floats = weight_bytes(model)
    quanto.quantize(model, weights=quanto.qint8)
    quanto.freeze(model)
    expected = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        if hasattr(tensor, "_data"):
            expected += tensor._data.numel() * tensor._data.element_size()
            expected += tensor._scale.numel() * tensor._scale.element_size()
        else:
            expected += tensor.numel() * tensor.element_size()
    assert weight_bytes(model) == expected
    assert weight_bytes(model) < 0.35 * floats
    assert count_parameters(model) == count_parameters(tiny_vit())
    assert count_flops(model, torch.randn(2, 3, 16, 16)) == count_flops(tiny_vit(), torch.randn(2, 3, 16, 16))


# ------------------------------------------------------------------------------------------ latency


def test_latency_stats_structure_and_modes_restored():
    model = tiny_vit()  # training mode
    model.vit.embeddings.eval()  # a submodule with its own flag
    flags = [m.training for m in model.modules()]
    threads = torch.get_num_threads()
    stats = measure_latency(model, torch.randn(4, 3, 16, 16), warmup=1, repeats=7, threads=1)
    assert isinstance(stats, LatencyStats)
    assert stats.n == 7 and len(stats.times) == 7 and stats.batch_size == 4
    assert 0 < stats.min <= stats.p50 <= stats.p99 <= max(stats.times)
    assert stats.min <= stats.mean <= max(stats.times)
    assert stats.p50_per_image == pytest.approx(stats.p50 / 4)
    assert set(stats.as_dict()) >= {"p50_s", "p99_s", "mean_s", "min_s", "n", "batch_size"}
    assert [m.training for m in model.modules()] == flags
    assert torch.get_num_threads() == threads


def test_compare_latency_interleaves_round_robin():
    calls = []
    models = {}
    for name in ("a", "b", "c"):
        models[name] = nn.Linear(4, 4)
        models[name].register_forward_pre_hook(lambda mod, args, name=name: calls.append(name))
    out = compare_latency(models, torch.randn(2, 4), warmup=1, repeats=3)
    assert list(out) == ["a", "b", "c"] and all(s.n == 3 for s in out.values())
    probe, warm, timed = calls[:3], calls[3:6], calls[6:]
    assert probe == warm == ["a", "b", "c"]
    assert timed == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]  # each round rotated by one


# ------------------------------------------------------------------------------------------ peak memory


def test_peak_memory_linear_stack_matches_hand_estimate():
    width, batch = 256, 64
    model = _stack(width)
    x = torch.randn(batch, width)
    stats = peak_memory(model, x)
    assert isinstance(stats, MemoryStats)
    # Live at worst: one layer's input and output activations (the network input is not counted).
    hand = 2 * batch * width * 4
    assert hand * 0.9 <= stats.activations_peak <= hand * 1.5
    assert stats.weights == weight_bytes(model)
    assert stats.inputs == x.numel() * 4
    assert stats.total_peak == stats.weights + stats.inputs + stats.activations_peak


def test_peak_memory_grows_with_width_and_batch():
    narrow, wide = _stack(128), _stack(256)
    assert peak_memory(wide, torch.randn(16, 256)).activations_peak > peak_memory(
        narrow, torch.randn(16, 128)).activations_peak
    vit = tiny_vit()
    one = peak_memory(vit, torch.randn(1, 3, 16, 16)).activations_peak
    many = peak_memory(vit, torch.randn(32, 3, 16, 16)).activations_peak
    assert 0 < one < many
    assert vit.training  # restored


# ------------------------------------------------------------------------------------------ reports


def test_budget_report_and_relative_budget():
    vit, cnn = tiny_vit(), tiny_cnn()
    example = torch.randn(3, 3, 16, 16)
    reports = compare_budgets({"single": vit, "cnn": cnn}, example, batch_sizes=(1, 4), warmup=1, repeats=3)
    report = reports["single"]
    assert report["parameters"] == count_parameters(vit)
    assert report["weight_bytes"] == weight_bytes(vit)
    assert report["flops_per_image"] == flops_per_image(vit, example)
    assert set(report["per_batch"]) == {1, 4}
    for row in report["per_batch"].values():
        assert row["latency_p50_s"] <= row["latency_p99_s"]
        assert row["peak_memory_bytes"] > report["weight_bytes"]
    assert report["per_batch"][4]["activations_peak_bytes"] > report["per_batch"][1]["activations_peak_bytes"]

    ratios = relative_budget(reports, reference="single")
    assert ratios["single"]["parameters"] == 1.0
    assert ratios["single"]["per_batch"][4]["latency_p50_s"] == 1.0
    assert ratios["cnn"]["flops_per_image"] == pytest.approx(
        reports["cnn"]["flops_per_image"] / report["flops_per_image"])
    assert "device" not in ratios["cnn"] and "threads" not in ratios["cnn"]

    alone = budget_report(cnn, example, batch_sizes=(2,), warmup=0, repeats=2)
    assert alone["parameters"] == count_parameters(cnn) and set(alone["per_batch"]) == {2}


def test_relative_budget_zero_reference():
    reports = {"single": {"x": 0, "y": 0}, "other": {"x": 3, "y": 0}}
    ratios = relative_budget(reports)
    assert ratios["other"]["x"] == math.inf and math.isnan(ratios["other"]["y"])


# ------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda m, x: count_flops("not a model", x), "nn.Module"),
        (lambda m, x: count_flops(m, [x]), "tensor .*or a non-empty mapping"),
        (lambda m, x: count_flops(m, torch.tensor(1.0)), "batch dimension"),
        (lambda m, x: count_flops(m, {"pixel_values": None}), "no tensor"),
        (lambda m, x: count_flops(m, {}), "non-empty"),
        (lambda m, x: measure_latency(m, x, repeats=0), "repeats"),
        (lambda m, x: measure_latency(m, x, warmup=-1), "warmup"),
        (lambda m, x: measure_latency(m, x, threads=0), "threads"),
        (lambda m, x: compare_latency({}, x), "non-empty mapping"),
        (lambda m, x: compare_latency({"a": m, "b": 3}, x), r"models\['b'\]"),
        (lambda m, x: weight_bytes(None), "nn.Module"),
        (lambda m, x: count_parameters(3), "nn.Module"),
        (lambda m, x: peak_memory(m, "x"), "tensor"),
        (lambda m, x: budget_report(m, x, batch_sizes=(1, 0)), "batch size"),
        (lambda m, x: budget_report(m, x, batch_sizes=()), "batch_sizes"),
        (lambda m, x: relative_budget({"a": {}}, reference="single"), "reference 'single'"),
    ],
)
def test_bad_inputs_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call(nn.Linear(4, 2), torch.randn(2, 4))
