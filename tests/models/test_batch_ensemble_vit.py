"""BatchEnsembleViT: conversion from ViT, equivalence with materialized members, latent ensembles, training
semantics with the stock Trainer, validation, parameter budget and save / load round trips."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForImageClassification,
    Trainer,
    TrainingArguments,
    ViTConfig,
    ViTForImageClassification,
)

import hf_uq.models.auto  # noqa: F401  (registers the Auto classes)
from hf_uq.evaluation import count_parameters
from hf_uq.functional import ensemble_uncertainty
from hf_uq.layers import BatchEnsembleLinear, fast_weight_parameter_names
from hf_uq.models.batch_ensemble_vit import (
    BatchEnsembleViTConfig,
    BatchEnsembleViTForImageClassification,
    BatchEnsembleViTModel,
)
from hf_uq.models.tiny import tiny_vit

M = 4
TINY = {"hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 64}


@pytest.fixture(scope="module")
def vit():
    model = tiny_vit(seed=0, **TINY).eval()
    with torch.no_grad():  # sharper than the 0.02 init, so that predictions are not all alike
        model.classifier.weight.mul_(30)
    return model


@pytest.fixture(scope="module")
def pixel_values():
    return torch.randn(5, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def _convert(vit, seed=0, **kwargs):
    torch.manual_seed(seed)
    return BatchEnsembleViTForImageClassification.from_vit(vit, ensemble_size=kwargs.pop("ensemble_size", M), **kwargs)


def materialized_member(model: BatchEnsembleViTForImageClassification, member: int) -> ViTForImageClassification:
    """Member `member` as a plain ViT: every BatchEnsemble layer replaced by its materialized `nn.Linear`."""
    config = ViTConfig(**{k: v for k, v in model.config.to_dict().items() if k in ViTConfig.__dataclass_fields__})
    config._attn_implementation = model.config._attn_implementation
    vit = ViTForImageClassification(config).eval()
    state = dict(model.state_dict())
    for name, module in model.named_modules():
        if isinstance(module, BatchEnsembleLinear):
            linear = module.member_linear(member)
            state[f"{name}.weight"], state[f"{name}.bias"] = linear.weight, linear.bias
    vit.load_state_dict({k: v for k, v in state.items() if k in vit.state_dict()}, strict=True)
    return vit


# ------------------------------------------------------------------------------------------ conversion


def test_ones_init_reproduces_the_source_vit(vit, pixel_values):
    model = _convert(vit, fast_weight_init="ones").eval()
    with torch.no_grad():
        reference = vit(pixel_values).logits
        output = model(pixel_values)
    assert output.member_logits.shape == (M, 5, 8) and output.logits.shape == (5, 8)
    for member in output.member_logits:
        torch.testing.assert_close(member, reference, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(output.logits, reference.log_softmax(-1), atol=1e-5, rtol=1e-5)
    assert torch.equal(output.logits.argmax(-1), reference.argmax(-1))
    torch.testing.assert_close(output.epistemic_uncertainty, torch.zeros(5), atol=1e-5, rtol=0)
    # the source is left alone: its weights were copied, not shared
    assert not any(p1.data_ptr() == p2.data_ptr() for p1 in vit.parameters() for p2 in model.parameters())


def test_default_init_makes_members_differ(vit, pixel_values):
    model = _convert(vit).eval()
    assert model.config.fast_weight_init == "random_sign"
    with torch.no_grad():
        output = model(pixel_values)
    spread = (output.member_logits - output.member_logits.mean(0)).abs().amax(dim=(1, 2))
    assert (spread > 1e-2).all()
    assert (output.epistemic_uncertainty > 0).all()
    terms = ensemble_uncertainty(output.member_logits.softmax(-1))
    for name in ("total", "aleatoric", "epistemic"):
        torch.testing.assert_close(getattr(output, f"{name}_uncertainty"), terms[name])
    torch.testing.assert_close(output.uncertainty, terms["total"])


def test_from_vit_accepts_a_folder_and_rejects_other_models(vit, tmp_path, pixel_values):
    vit.save_pretrained(tmp_path / "vit")
    torch.manual_seed(0)
    from_folder = BatchEnsembleViTForImageClassification.from_vit(str(tmp_path / "vit"), 2, fast_weight_init="ones")
    with torch.no_grad():
        torch.testing.assert_close(from_folder.eval()(pixel_values).member_logits[1], vit(pixel_values).logits,
                                   atol=1e-5, rtol=1e-5)
    assert from_folder.config.id2label == vit.config.id2label
    with pytest.raises(TypeError, match="ViTForImageClassification"):
        BatchEnsembleViTForImageClassification.from_vit(from_folder)


# ------------------------------------------------------------------------------------------ equivalences


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"ensemble_layers": [1, 3], "ensemble_sublayers": ["mlp", "classifier"]},
        {"ensemble_layers": [0], "ensemble_sublayers": ["attention"]},
        {"ensemble_layers": [], "ensemble_sublayers": ["classifier"]},
    ],
    ids=["all", "mlp-blocks-1-3-and-head", "attention-block-0", "head-only"],
)
def test_batched_members_equal_separate_vits_with_materialized_weights(vit, pixel_values, kwargs):
    model = _convert(vit, fast_weight_init="normal", **kwargs).eval()
    with torch.no_grad():
        member_logits = model(pixel_values).member_logits
        for i in range(M):
            expected = materialized_member(model, i)(pixel_values).logits
            torch.testing.assert_close(member_logits[i], expected, atol=1e-5, rtol=1e-5)


def test_in_place_inference_path_equals_the_autograd_path(vit, pixel_values):
    model = _convert(vit, fast_weight_init="normal").eval()
    with_grad = model(pixel_values).member_logits.detach()
    with torch.inference_mode():
        torch.testing.assert_close(model(pixel_values).member_logits, with_grad)
    in_place = {n for n, m in model.named_modules() if isinstance(m, BatchEnsembleLinear) and m.scale_input_in_place}
    assert {n.split(".", 3)[3] for n in in_place} == {"attention.v_proj", "attention.o_proj", "mlp.fc1", "mlp.fc2"}


def test_latent_ensemble_runs_the_shared_blocks_once(vit, pixel_values):
    k = 2
    model = _convert(vit, ensemble_layers=[-2, -1]).eval()
    assert model.config.ensemble_layers == [2, 3] and model.config.tile_index == 2
    batch_sizes = []
    hooks = [layer.register_forward_hook(lambda m, a, o: batch_sizes.append(o.shape[0])) for layer in model.vit.layers]
    try:
        with torch.no_grad():
            output = model(pixel_values)
    finally:
        for hook in hooks:
            hook.remove()
    assert batch_sizes == [5, 5, M * 5, M * 5]  # the first L - k blocks see the batch once
    with torch.no_grad():
        shared = model.vit.embeddings(pixel_values)
        for layer in model.vit.layers[: 4 - k]:
            shared = layer(shared)
        for i in range(M):
            member = materialized_member(model, i)
            hidden = shared
            for layer in member.vit.layers[4 - k :]:
                hidden = layer(hidden)
            logits = member.classifier(member.vit.layernorm(hidden)[:, 0])
            torch.testing.assert_close(output.member_logits[i], logits, atol=1e-5, rtol=1e-5)
    # only the ensembled blocks hold BatchEnsemble layers
    assert not any(isinstance(m, BatchEnsembleLinear) for m in model.vit.layers[:2].modules())
    assert sum(isinstance(m, BatchEnsembleLinear) for m in model.vit.layers[2:].modules()) == 12


def test_base_model_hidden_states(vit, pixel_values):
    model = _convert(vit, ensemble_layers=[3]).eval()
    with torch.no_grad():
        output = model.vit(pixel_values, output_hidden_states=True)
        classified = model(pixel_values, output_hidden_states=True)
    assert isinstance(model.vit, BatchEnsembleViTModel)
    assert output.last_hidden_state.shape == (M * 5, 17, 32)
    assert [h.shape[0] for h in output.hidden_states] == [5, 5, 5, 5, M * 5]
    assert len(classified.hidden_states) == 5
    with pytest.raises(ValueError, match="attention weights"):
        model(pixel_values, output_attentions=True)


# ------------------------------------------------------------------------------------------ training


def test_training_loss_is_the_mean_member_cross_entropy_and_eval_loss_the_nll_of_the_mean(vit, pixel_values):
    model = _convert(vit, fast_weight_init="normal")
    model.config.hidden_dropout_prob = 0.0
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    labels = torch.tensor([0, 1, 2, 3, 4])
    model.train()
    output = model(pixel_values, labels=labels)
    expected = torch.stack(
        [nn.functional.cross_entropy(z, labels) for z in output.member_logits]
    ).mean()
    torch.testing.assert_close(output.loss, expected)
    output.loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    model.eval()
    with torch.no_grad():
        output = model(pixel_values, labels=labels)
    torch.testing.assert_close(output.loss, nn.functional.nll_loss(output.logits, labels))
    assert output.to_tuple()[0] is output.loss


def test_stock_trainer_trains_and_evaluates_without_decaying_fast_weights(vit, tmp_path):
    model = _convert(vit, ensemble_layers=[-1])
    generator = torch.Generator().manual_seed(0)
    rows = [{"pixel_values": torch.randn(3, 16, 16, generator=generator), "labels": i % 8} for i in range(16)]
    args = TrainingArguments(
        output_dir=str(tmp_path), report_to="none", use_cpu=True, max_steps=2, per_device_train_batch_size=8,
        per_device_eval_batch_size=8, learning_rate=1e-2, weight_decay=0.5, save_strategy="no",
        remove_unused_columns=False, disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=rows, eval_dataset=rows)
    fast = set(fast_weight_parameter_names(model))
    assert len(fast) == 6 * 2 + 2
    decayed = set(trainer.get_decay_parameter_names(model))
    assert not fast & decayed and not any(n.endswith("bias") for n in decayed)
    assert "vit.layers.3.mlp.fc1.weight" in decayed and "classifier.weight" in decayed
    before = copy.deepcopy(model.state_dict())
    trainer.train()
    after = model.state_dict()
    assert not torch.equal(before["vit.layers.3.mlp.fc1.fast_in_norm"], after["vit.layers.3.mlp.fc1.fast_in_norm"])
    optimizer_groups = {
        id(p): group["weight_decay"] for group in trainer.optimizer.param_groups for p in group["params"]
    }
    named = dict(model.named_parameters())
    assert all(optimizer_groups[id(named[n])] == 0.0 for n in fast)
    metrics = trainer.evaluate()
    model.eval()
    with torch.no_grad():
        batch = torch.stack([r["pixel_values"] for r in rows])
        expected = model(batch, labels=torch.tensor([r["labels"] for r in rows])).loss
    assert metrics["eval_loss"] == pytest.approx(float(expected), rel=1e-4)


def test_gradient_checkpointing(vit, pixel_values):
    model = _convert(vit, ensemble_layers=[-2, -1])
    model.activation_checkpointing_enable()
    model.train()
    model(pixel_values, labels=torch.zeros(5, dtype=torch.long)).loss.backward()
    assert model.vit.layers[3].mlp.fc1.fast_in_norm.grad is not None


# ------------------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"ensemble_size": 0}, "ensemble_size"),
        ({"ensemble_layers": [0, 4]}, "block index 4"),
        ({"ensemble_layers": [-5]}, "block index -5"),
        ({"ensemble_sublayers": ["mlp", "ffn"]}, "'ffn'"),
        ({"ensemble_sublayers": []}, "empty"),
        ({"fast_weight_init": "zeros"}, "'zeros'"),
        ({"uncertainty_score": "variance"}, "'variance'"),
        ({"ensemble_layers": [], "ensemble_sublayers": ["mlp"]}, "nothing is ensembled"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BatchEnsembleViTConfig(num_hidden_layers=4, **kwargs)


def test_config_normalizes_layers_and_sublayers():
    config = BatchEnsembleViTConfig(num_hidden_layers=6, ensemble_layers=[-1, 2, 5], ensemble_sublayers=["mlp", "attention"])
    assert config.ensemble_layers == [2, 5]
    assert config.ensemble_sublayers == ["attention", "mlp"]
    assert config.tile_index == 2
    assert BatchEnsembleViTConfig(num_hidden_layers=3).ensemble_layers == [0, 1, 2]
    head_only = BatchEnsembleViTConfig(num_hidden_layers=3, ensemble_sublayers=["classifier"])
    assert head_only.ensembled_blocks == [] and head_only.tile_index == 3
    assert isinstance(config, ViTConfig) and config.model_type == "batch_ensemble_vit"


def test_from_vit_validates_like_the_config(vit):
    with pytest.raises(ValueError, match="block index 7"):
        BatchEnsembleViTForImageClassification.from_vit(vit, ensemble_layers=[7])
    with pytest.raises(ValueError, match="ensemble_size"):
        BatchEnsembleViTForImageClassification.from_vit(vit, ensemble_size=0)


# ------------------------------------------------------------------------------------------ budget


def _linear_overhead(model, members):
    """Parameters BatchEnsemble adds to a linear layer: r and s per member, and M - 1 more biases."""
    extra = 0
    for module in model.modules():
        if isinstance(module, BatchEnsembleLinear):
            extra += members * (module.in_features + module.out_features) + (members - 1) * module.out_features
    return extra


def test_parameter_count(vit):
    model = _convert(vit)
    assert count_parameters(model) == count_parameters(vit) + _linear_overhead(model, M)
    # ViT-Base (hidden 768, 12 blocks), 4 members over every block: within 2% of the single model
    with torch.device("meta"):
        base = ViTForImageClassification(ViTConfig(num_labels=1000))
        config = BatchEnsembleViTConfig(num_labels=1000, ensemble_size=M)
        batch_ensemble = BatchEnsembleViTForImageClassification(config)
    ratio = count_parameters(batch_ensemble) / count_parameters(base)
    print(f"ViT-Base BatchEnsemble parameters, M = {M}: {ratio:.4f}x the single ViT")
    assert ratio <= 1.02


# ------------------------------------------------------------------------------------------ save / load


def test_auto_round_trip(vit, pixel_values, tmp_path):
    model = _convert(vit, ensemble_layers=[-2, -1], ensemble_sublayers=["mlp", "classifier"]).eval()
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "batch_ensemble_vit" and saved["ensemble_layers"] == [2, 3]
    assert saved["auto_map"]["AutoModelForImageClassification"].startswith("modeling_batch_ensemble_vit.")
    config = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, BatchEnsembleViTConfig) and config.ensemble_sublayers == ["mlp", "classifier"]
    with torch.no_grad():
        expected = model(pixel_values)
        for auto in (AutoModel, AutoModelForImageClassification):
            loaded = auto.from_pretrained(tmp_path).eval()
            assert isinstance(loaded, BatchEnsembleViTForImageClassification)
            output = loaded(pixel_values)
            assert torch.equal(output.logits, expected.logits)
            assert torch.equal(output.member_logits, expected.member_logits)


ISOLATED_LOAD = """
import sys

class BlockHfUq:
    def find_spec(self, name, path=None, target=None):
        if name == "hf_uq" or name.startswith("hf_uq."):
            raise ModuleNotFoundError(name)

sys.meta_path.insert(0, BlockHfUq())
import torch
from transformers import AutoModelForImageClassification

folder, io = sys.argv[1], sys.argv[2]
data = torch.load(io)
model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True).eval()
with torch.no_grad():
    output = model(pixel_values=data["x"])
torch.save({"member_logits": output.member_logits, "module": type(model).__module__}, io)
"""


@pytest.mark.slow  # a fresh interpreter importing transformers: seconds to a minute on a busy machine
def test_saved_model_loads_with_trust_remote_code_without_hf_uq(vit, pixel_values, tmp_path):
    model = _convert(vit, ensemble_layers=[-1]).eval()
    model.save_pretrained(tmp_path / "model")
    assert (tmp_path / "model" / "batch_ensemble.py").exists()
    io = tmp_path / "io.pt"
    torch.save({"x": pixel_values}, io)
    (tmp_path / "load.py").write_text(ISOLATED_LOAD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"), TRANSFORMERS_VERBOSITY="error")
    run = subprocess.run(
        [sys.executable, "-I", str(tmp_path / "load.py"), str(tmp_path / "model"), str(io)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = torch.load(io)
    assert result["module"].startswith("transformers_modules.")
    with torch.no_grad():
        assert torch.equal(result["member_logits"], model(pixel_values).member_logits)
