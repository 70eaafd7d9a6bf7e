"""DuoForImageClassification: fusion formula, uncertainty, label checks, fitting, persistence."""

import copy

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForImageClassification

import hf_uq  # noqa: F401  (registers the Auto classes)
from hf_uq.functional import entropy, msp
from hf_uq.models.duo import DuoConfig, DuoForImageClassification
from hf_uq.models.tiny import tiny_cnn, tiny_vit

LABELS = {i: str(i) for i in range(8)}


@pytest.fixture(scope="module")
def members():
    large = tiny_vit(hidden_size=32, num_hidden_layers=2, seed=0).eval()
    small = tiny_cnn(seed=1).eval()
    return large, small


@pytest.fixture(scope="module")
def pixels():
    return torch.randn(6, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def test_fused_logits_follow_the_formula(members, pixels):
    large, small = members
    duo = DuoForImageClassification.from_members(large, small, temperatures=[2.0, 0.5]).eval()
    with torch.no_grad():
        out = duo(pixel_values=pixels)
        z_l, z_s = large(pixel_values=pixels).logits, small(pixel_values=pixels).logits
    torch.testing.assert_close(out.logits, z_l / 2.0 + z_s / 0.5, rtol=0, atol=1e-6)
    torch.testing.assert_close(out.member_logits, torch.stack([z_l, z_s]))
    # the paper's uncertainty: 1 - the duo's probability of the large member's class
    p = out.logits.softmax(-1)
    expected = 1 - p[torch.arange(6), z_l.argmax(-1)]
    torch.testing.assert_close(out.uncertainty, expected)
    torch.testing.assert_close(out.total_uncertainty, entropy(p))
    assert out.loss is None


def test_whole_duo_traces_under_torch_compile(members, pixels):
    # dynamo used to fail building its guards on the numpy-checked temperatures inside forward (inference mode);
    # the eager backend runs dynamo's tracing and guards without inductor's compile time
    large, small = members
    duo = DuoForImageClassification.from_members(large, small, temperatures=[1.3, 2.1]).eval()
    with torch.inference_mode():
        expected = duo(pixel_values=pixels)
    compiled = torch.compile(duo, backend="eager")  # graph breaks (input checks) are fine; failing is not
    with torch.inference_mode():
        out = compiled(pixel_values=pixels)
    torch.testing.assert_close(out.logits, expected.logits, rtol=0, atol=1e-6)
    torch.testing.assert_close(out.uncertainty, expected.uncertainty, rtol=0, atol=1e-6)


def test_selectable_uncertainty_and_loss(members, pixels):
    duo = DuoForImageClassification.from_members(*members, uncertainty_score="msp").eval()
    labels = torch.arange(6)
    with torch.no_grad():
        out = duo(pixel_values=pixels, labels=labels)
    torch.testing.assert_close(out.uncertainty, msp(out.logits.softmax(-1)))
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits, labels))
    with pytest.raises(ValueError, match="uncertainty_score"):
        DuoForImageClassification.from_members(*members, uncertainty_score="variance")


def test_per_member_inputs(members, pixels):
    large, small = members
    duo = DuoForImageClassification.from_members(large, small).eval()
    other = pixels.flip(-1)
    with torch.no_grad():
        out = duo(pixel_values=pixels, pixel_values_small=other)
        expected = large(pixel_values=pixels).logits + small(pixel_values=other).logits
    torch.testing.assert_close(out.logits, expected, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="batch size 6 but `pixel_values_small` has 2"):
        duo(pixel_values=pixels, pixel_values_small=other[:2])


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (torch.randn(3, 16, 16), r"\(batch, channels, height, width\), got \(3, 16, 16\)"),
        (torch.zeros(2, 3, 16, 16, dtype=torch.long), "floating tensor"),
        ([[0.0]], "must be a torch.Tensor"),
    ],
)
def test_wrong_pixel_values(members, bad, message):
    duo = DuoForImageClassification.from_members(*members)
    with pytest.raises(ValueError, match=message):
        duo(pixel_values=bad)


def test_wrong_channel_count_is_a_clear_error(members):
    duo = DuoForImageClassification.from_members(*members)
    with pytest.raises(ValueError, match="channel"):
        duo(pixel_values=torch.randn(2, 1, 16, 16))


def test_mismatched_label_spaces(members):
    large, _ = members
    other = tiny_cnn(id2label={i: f"class_{i}" for i in range(8)}, seed=2)
    with pytest.raises(ValueError, match="different label names"):
        DuoForImageClassification.from_members(large, other)
    fewer = tiny_cnn(num_labels=5, seed=2)
    with pytest.raises(ValueError, match="large has 8 labels but small has 5"):
        DuoForImageClassification.from_members(large, fewer)


def test_align_labels_reorders_the_sidekick(members, pixels):
    large, small = members
    order = [3, 0, 7, 1, 6, 2, 5, 4]  # small_perm's label i is the original label order[i]
    small_perm = copy.deepcopy(small)
    head = small_perm.timm_model.get_classifier()
    with torch.no_grad():
        head.weight.copy_(small.timm_model.get_classifier().weight[order])
        head.bias.copy_(small.timm_model.get_classifier().bias[order])
    small_perm.config.id2label = {i: LABELS[o] for i, o in enumerate(order)}
    small_perm.config.label2id = {v: k for k, v in small_perm.config.id2label.items()}
    with pytest.raises(ValueError, match="align_labels=True"):
        DuoForImageClassification.from_members(large, small_perm)
    aligned = DuoForImageClassification.from_members(large, small_perm, align_labels=True).eval()
    reference = DuoForImageClassification.from_members(large, small).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            aligned(pixel_values=pixels).logits, reference(pixel_values=pixels).logits
        )


def test_fit_temperatures_stores_them_and_keeps_weights(members):
    large, small = members
    duo = DuoForImageClassification.from_members(large, small)
    before = {k: v.clone() for k, v in duo.state_dict().items()}
    g = torch.Generator().manual_seed(1)
    batches = [
        {
            "pixel_values": torch.randn(16, 3, 16, 16, generator=g),
            "labels": torch.randint(0, 8, (16,), generator=g),
        }
        for _ in range(4)
    ]
    temps = duo.fit_temperatures(batches)
    assert duo.config.temperatures == temps and all(t > 0 for t in temps)
    assert temps != [1.0, 1.0]
    after = duo.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # the fit minimizes the NLL of the fused logits on that data
    z_l, z_s, y = duo.collect_member_logits(batches)

    def nll(t):
        return torch.nn.functional.cross_entropy(z_l / t[0] + z_s / t[1], y).item()

    assert nll(temps) <= nll([1.0, 1.0]) + 1e-9
    assert nll(temps) <= min(nll([a, b]) for a in (0.5, 1, 2, 4) for b in (0.5, 1, 2, 4)) + 1e-6


def test_save_and_load_through_auto_classes(members, pixels, tmp_path):
    duo = DuoForImageClassification.from_members(*members, temperatures=[1.3, 2.1]).eval()
    duo.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert not list(tmp_path.glob("*.bin"))
    config = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, DuoConfig) and config.temperatures == [1.3, 2.1]
    assert config.small_config.id2label == LABELS  # the timm member keeps its labels
    with torch.no_grad():
        expected = duo(pixel_values=pixels)
        for auto in (AutoModel, AutoModelForImageClassification):
            loaded = auto.from_pretrained(tmp_path).eval()
            assert isinstance(loaded, DuoForImageClassification)
            out = loaded(pixel_values=pixels)
            assert torch.equal(out.logits, expected.logits)
            assert torch.equal(out.uncertainty, expected.uncertainty)


def test_from_members_accepts_folders(members, pixels, tmp_path):
    large, small = members
    large.save_pretrained(tmp_path / "large")
    small.save_pretrained(tmp_path / "small")
    duo = DuoForImageClassification.from_members(str(tmp_path / "large"), tmp_path / "small").eval()
    reference = DuoForImageClassification.from_members(large, small).eval()
    with torch.no_grad():
        assert torch.equal(duo(pixel_values=pixels).logits, reference(pixel_values=pixels).logits)
    with pytest.raises(ValueError, match="no model folder"):
        DuoForImageClassification.from_members(str(tmp_path / "missing"), small)


def test_config_validates_temperatures():
    with pytest.raises(ValueError, match="two positive numbers"):
        DuoConfig(temperatures=[1.0, -1.0])
