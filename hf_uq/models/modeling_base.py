"""The base class of every hf_uq model."""

from __future__ import annotations

import importlib
import os
from typing import Any

from torch import nn
from transformers import PreTrainedModel


class HfUqPreTrainedModel(PreTrainedModel):
    """Shared behaviour of hf_uq models: image input, members that initialize themselves, and folders that
    load without hf_uq (`trust_remote_code=True`)."""

    main_input_name = "pixel_values"
    input_modalities = ("image",)
    _supports_sdpa = True

    def _init_weights(self, module: nn.Module) -> None:
        # wrapped members are PreTrainedModels and initialize themselves with their own
        # `_init_weights`; a model with parameters of its own overrides this
        pass

    def save_pretrained(
        self, save_directory: str | os.PathLike, *args: Any, remote_code: bool = True, **kwargs: Any
    ) -> Any:
        r"""
        Save the model like [`~transformers.PreTrainedModel.save_pretrained`], plus self-contained remote code.

        Args:
            save_directory (`str` or `os.PathLike`):
                The folder to save into.
            remote_code (`bool`, *optional*, defaults to `True`):
                Also write the Python files defining the model (hf_uq imports rewritten to flat relative ones)
                and an `auto_map` for `AutoConfig`, `AutoModel` and `AutoModelForImageClassification` into
                `config.json`, so that `AutoModelForImageClassification.from_pretrained(folder,
                trust_remote_code=True)` works without hf_uq. See `hf_uq.hub.remote_code`.
            args, kwargs:
                Passed to [`~transformers.PreTrainedModel.save_pretrained`].
        """
        # Only a class defined inside hf_uq is bundled. The bundled copy of this file (loaded by
        # transformers as remote code) skips this branch: transformers re-saves remote code itself. The
        # bundler is imported by a relative name so that it stays out of the bundles.
        if remote_code and type(self).__module__.startswith("hf_uq."):
            remote = importlib.import_module("..hub.remote_code", __package__)
            return remote.save_pretrained_with_remote_code(
                self, super().save_pretrained, save_directory, *args, **kwargs
            )
        return super().save_pretrained(save_directory, *args, **kwargs)
