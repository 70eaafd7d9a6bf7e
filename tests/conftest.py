"""Fixtures shared by the whole suite (folders add their own conftest.py)."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread for a module: tiny models run fastest single-threaded, and torch's thread pool stalls
    when other jobs share the cores. Opt in with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
