"""Shared fixtures of the quantization tests: tiny models built in code, random pixels, a small digits subset."""

import pytest
import torch

import hf_uq  # noqa: F401  (Auto-class and quantizer registrations)
from hf_uq.models.tiny import tiny_cnn, tiny_vit


@pytest.fixture(scope="module", autouse=True)
def _one_thread_for_every_module(one_thread):
    """Tiny models run much faster on one thread than on two contended ones (see tests/conftest.py)."""
    yield


@pytest.fixture(scope="session")
def pixels():
    return torch.randn(16, 3, 16, 16, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="session")
def vit():
    return tiny_vit(seed=0).eval()


@pytest.fixture(scope="session")
def cnn():
    return tiny_cnn(channels=(8, 16, 32, 32), seed=1).eval()


@pytest.fixture(scope="session")
def duo(vit, cnn):
    from hf_uq import DuoForImageClassification

    return DuoForImageClassification.from_members(vit, cnn, temperatures=(1.5, 2.0)).eval()


@pytest.fixture(scope="session")
def digits():
    """A small slice of the embedded benchmark, already turned into pixel values."""
    from datasets import DatasetDict

    from hf_uq.data import load_digits_benchmark, with_pixel_values
    from hf_uq.models.tiny import tiny_vit_image_processor

    benchmark = load_digits_benchmark(seed=0)
    sizes = {"validation": 64, "test": 96, "ood_near": 48, "ood_far": 48}
    processor = tiny_vit_image_processor()
    return DatasetDict(
        {name: with_pixel_values(benchmark[name].select(range(n)), processor) for name, n in sizes.items()}
    )


def logits_correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.corrcoef(torch.stack([a.flatten().double(), b.flatten().double()]))[0, 1])


@pytest.fixture(scope="session")
def correlation():
    return logits_correlation
