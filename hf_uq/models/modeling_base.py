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

    def push_to_hub(
        self,
        repo_id: str,
        *,
        commit_message: str | None = None,
        commit_description: str | None = None,
        private: bool | None = None,
        token: bool | str | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        max_shard_size: int | str | None = "50GB",
        tags: list[str] | None = None,
    ) -> Any:
        r"""
        Upload the model to the Hub like [`~transformers.PreTrainedModel.push_to_hub`], in one commit with its
        remote code, the image processor config of the folder it was loaded from, and its uncertainty card.

        The card is, first match wins: `self.uncertainty_card` when set (a `huggingface_hub.ModelCard` such as
        `hf_uq.hub.model_card(results, route)`, a card's text, or a `README.md` path); the `README.md` (and
        `plots/`) of the local folder the model was loaded from; else a minimal card stating that no evaluation
        results are attached. It replaces the repository's card. See `hf_uq.hub.push`.

        Args:
            repo_id (`str`):
                The repository, `"namespace/name"` or `"name"` (the token's namespace).
            commit_message (`str`, *optional*), commit_description (`str`, *optional*):
                The commit's summary and description.
            private (`bool`, *optional*):
                Create the repository private (ignored when it exists).
            token (`bool` or `str`, *optional*):
                A Hub token; default: the locally saved one.
            revision (`str`, *optional*):
                The branch to push to (created when missing).
            create_pr (`bool`, *optional*, defaults to `False`):
                Open a pull request instead of committing to the branch.
            max_shard_size (`int` or `str`, *optional*, defaults to `"50GB"`):
                Passed to `save_pretrained`.
            tags (`list[str]`, *optional*):
                Added to the card's tags (with `self.model_tags`).

        Returns:
            `huggingface_hub.CommitInfo`: the commit.
        """
        kwargs = {
            "commit_message": commit_message, "commit_description": commit_description, "private": private,
            "token": token, "revision": revision, "create_pr": create_pr, "max_shard_size": max_shard_size,
            "tags": tags,
        }
        # The bundled copy of this file (remote code, loaded without hf_uq) has no hub package to call: there it
        # behaves like transformers. Imported by a relative name to keep the pusher out of the bundles.
        if not __name__.startswith("hf_uq."):
            return super().push_to_hub(repo_id, **kwargs)
        push = importlib.import_module("..hub.push", __package__)
        return push.push_model(self, repo_id, **kwargs)
