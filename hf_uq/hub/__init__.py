"""Sharing hf_uq models: self-contained remote code, uncertainty model cards, and pushing to the Hub.

- `remote_code`: the Python files saved next to a model so that it loads with `trust_remote_code=True`.
- `cards`: [`model_card`] / [`write_model_card`] build a model's card (README.md) from a `results.json`.
- `push`: [`push_folder`] / [`push_model`] upload a model folder with its card in one commit
  (`model.push_to_hub(repo_id)` runs [`push_model`]).

The card and push names load lazily (they import `huggingface_hub`'s card machinery and the evaluation layer),
so saving a model, which uses `remote_code`, stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from .remote_code import RemoteCodeBundle, RemoteCodeError, build_remote_code

_LAZY = {
    "card_metrics": "cards",
    "infer_route": "cards",
    "minimal_model_card": "cards",
    "model_card": "cards",
    "save_card": "cards",
    "uncertainty_eval_results": "cards",
    "write_model_card": "cards",
    "check_model_folder": "push",
    "push_folder": "push",
    "push_model": "push",
}

__all__ = ["RemoteCodeBundle", "RemoteCodeError", "build_remote_code", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
