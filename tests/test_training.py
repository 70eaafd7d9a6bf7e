import copy
import random

import numpy as np
import pytest
import torch

from hf_uq.data import load_digits_benchmark, with_pixel_values
from hf_uq.models.tiny import tiny_cnn, tiny_image_processor, tiny_vit, tiny_vit_image_processor
from hf_uq.training import fit_classifier

SMALL_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
QUIET = dict(verbose=False, num_threads=1)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits():
    return load_digits_benchmark(seed=0, include_ood=False, shifts=())


def accuracy(model, dataset, processor) -> float:
    batch = with_pixel_values(dataset, processor)[:]
    with torch.no_grad():
        logits = model(pixel_values=batch["pixel_values"]).logits
    return float((logits.argmax(-1) == batch["labels"]).float().mean())


def logits_on(model, dataset, processor, n: int = 64) -> torch.Tensor:
    batch = with_pixel_values(dataset.select(range(n)), processor)[:]
    with torch.no_grad():
        return model(pixel_values=batch["pixel_values"]).logits


def test_short_training_beats_chance(digits):
    processor = tiny_vit_image_processor()
    model = tiny_vit(**SMALL_VIT)
    before = accuracy(model.eval(), digits["validation"], processor)
    trained = fit_classifier(model, digits, processor, epochs=12, batch_size=32, **QUIET)
    after = accuracy(trained, digits["validation"], processor)
    assert before < 0.3  # chance is 1/8
    assert after > 0.5, after
    assert not trained.training


def test_callers_objects_are_not_mutated(digits):
    processor = tiny_vit_image_processor()
    model = tiny_vit(**SMALL_VIT)
    weights = copy.deepcopy(model.state_dict())
    processor_state = processor.to_dict()
    train_fingerprint, train_format = digits["train"]._fingerprint, dict(digits["train"].format)
    extra = {"max_steps": 2}
    extra_copy = dict(extra)
    rng_states = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())

    torch.set_num_threads(2)
    try:
        trained = fit_classifier(model, digits, processor, **QUIET, **extra)
        threads_after = torch.get_num_threads()
    finally:
        torch.set_num_threads(1)

    assert trained is not model
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    assert not all(torch.equal(weights[k], v) for k, v in trained.state_dict().items())
    assert processor.to_dict() == processor_state
    assert (
        digits["train"]._fingerprint == train_fingerprint and digits["train"].format == train_format
    )
    assert extra == extra_copy
    assert random.getstate() == rng_states[0]
    assert np.array_equal(np.random.get_state()[1], rng_states[1])
    assert torch.equal(torch.get_rng_state(), rng_states[2])
    assert threads_after == 2


def test_same_seed_same_logits(digits):
    processor = tiny_vit_image_processor()
    model = tiny_vit(**SMALL_VIT)
    runs = [
        fit_classifier(model, digits, processor, max_steps=6, seed=seed, **QUIET)
        for seed in (5, 5, 6)
    ]
    first, again, other = (logits_on(run, digits["test"], processor) for run in runs)
    assert torch.equal(first, again)
    assert not torch.allclose(first, other)


def test_pretransformed_dataset_and_plain_dataset(digits):
    processor = tiny_vit_image_processor()
    model = tiny_vit(**SMALL_VIT)
    ready = with_pixel_values(digits, processor)
    from_ready = fit_classifier(
        model, ready, max_steps=4, eval_split=None, preprocess_in_memory=False, **QUIET
    )
    from_raw = fit_classifier(model, digits, processor, max_steps=4, eval_split=None, **QUIET)
    assert torch.equal(
        logits_on(from_ready, digits["test"], processor),
        logits_on(from_raw, digits["test"], processor),
    )
    single = fit_classifier(
        model, digits["train"].select(range(64)), processor, max_steps=1, **QUIET
    )
    assert single is not model


def test_argument_errors(digits):
    model = tiny_vit(**SMALL_VIT)
    with pytest.raises(
        ValueError, match=r"Split 'valid' not found.*\['train', 'validation', 'test'\]"
    ):
        fit_classifier(model, digits, tiny_vit_image_processor(), eval_split="valid", **QUIET)
    with pytest.raises(ValueError, match="pixel_values"):
        fit_classifier(model, digits, **QUIET)


def test_output_dir_holds_a_reloadable_model(digits, tmp_path, capsys):
    from transformers import AutoImageProcessor, AutoModelForImageClassification

    processor = tiny_vit_image_processor()
    trained = fit_classifier(
        tiny_vit(**SMALL_VIT),
        digits,
        processor,
        max_steps=2,
        output_dir=str(tmp_path),
        disable_tqdm=True,
    )
    assert "validation accuracy:" in capsys.readouterr().out
    reloaded = AutoModelForImageClassification.from_pretrained(tmp_path).eval()
    reloaded_processor = AutoImageProcessor.from_pretrained(tmp_path)
    assert torch.equal(
        logits_on(trained, digits["test"], processor),
        logits_on(reloaded, digits["test"], reloaded_processor),
    )
    assert not any(path.name.startswith("checkpoint") for path in tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("build", [tiny_vit, tiny_cnn])
def test_default_training_reaches_ninety_percent(build):
    benchmark = load_digits_benchmark(seed=0, include_ood=False, shifts=())
    model = build()
    processor = tiny_image_processor(model)
    trained = fit_classifier(model, benchmark, processor, **QUIET)
    assert accuracy(trained, benchmark["test"], processor) >= 0.9
