"""Push an hf_uq model folder to the Hub in one commit, with its uncertainty card.

[`push_folder`] uploads a saved model folder (weights, `config.json`, the image processor's config, the remote-code
`.py` files, `README.md` and `plots/`) with one `HfApi.create_commit`. [`push_model`] is what
`HfUqPreTrainedModel.push_to_hub` runs: it saves the model into a temporary folder, adds the card, and calls
[`push_folder`].

Which card travels with `model.push_to_hub(repo_id)`, first match wins:

1. `model.uncertainty_card`, when set: a `huggingface_hub.ModelCard` (e.g. from [`~hf_uq.hub.model_card`], whose
   plots are copied too), the text of a card, or the path of a `README.md`;
2. the `README.md` of the local folder the model was loaded from (`model.name_or_path`), with its `plots/`, e.g. a
   folder `hf-uq card` or the benchmark runner wrote a card into;
3. otherwise a minimal card ([`~hf_uq.hub.minimal_model_card`]) saying that no evaluation results are attached.

The card replaces whatever card the repository had: an hf_uq card is the evidence for these weights, and a card
left from other weights would misreport them. `hf-uq push DIR` follows rule 2 for the folder itself, and rule 3
when it has no `README.md`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi, ModelCard

from .cards import minimal_model_card, plot_files, save_card

__all__ = ["WEIGHT_FILES", "auto_map_modules", "check_model_folder", "folder_files", "push_folder", "push_model"]

#: Any one of these makes a folder a saved model.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
#: Processor configs carried over from the folder a model was loaded from.
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")


def folder_files(folder: str | os.PathLike) -> dict[str, Path]:
    """Every file under `folder` that a push uploads, as `{path in repo: local path}` (sorted). Hidden files and
    folders (`.git`, `.cache`, ...), `__pycache__` and `*.pyc` are skipped."""
    folder = Path(folder)
    files = {}
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        if not path.is_file() or any(p.startswith(".") or p == "__pycache__" for p in parts):
            continue
        if path.suffix == ".pyc":
            continue
        files["/".join(parts)] = path
    return files


def auto_map_modules(config_file: str | os.PathLike) -> list[str]:
    """The remote-code files (`"modeling_duo.py"`) named by the `auto_map` of a `config.json` or processor config;
    entries pointing at another repository (`"repo--module.Class"`) are left out."""
    try:
        auto_map = json.loads(Path(config_file).read_text(encoding="utf-8")).get("auto_map") or {}
    except json.JSONDecodeError as error:
        raise ValueError(f"{config_file} is not valid JSON: {error}") from error
    modules = []
    for reference in auto_map.values():
        for entry in reference if isinstance(reference, list) else [reference]:
            if isinstance(entry, str) and "--" not in entry:
                modules.append(entry.rsplit(".", 1)[0] + ".py")
    return sorted(set(modules))


def check_model_folder(folder: str | os.PathLike) -> None:
    """
    Check that `folder` holds a saved model: `config.json`, the weights, and every remote-code module its
    `auto_map` names (`config.json` and `preprocessor_config.json`).

    Raises:
        `FileNotFoundError`: not a folder. `ValueError`: a missing file, named in the message.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder not found: {folder}")
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} is not a saved model: config.json is missing")
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise ValueError(f"{folder} has no weights (expected one of {', '.join(WEIGHT_FILES)})")
    missing = []
    for name in ("config.json", *PROCESSOR_FILES):
        if (folder / name).is_file():
            missing.extend(m for m in auto_map_modules(folder / name) if not (folder / m).is_file())
    if missing:
        raise ValueError(f"{folder} is missing the remote-code files its auto_map names: "
                         f"{', '.join(sorted(set(missing)))}")


def push_folder(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: bool | str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    commit_description: str | None = None,
    create_repo: bool = True,
) -> CommitInfo:
    """
    Upload a saved model folder to a Hub model repository in one commit (creating the repository if needed).

    Every file [`folder_files`] lists is committed: weights, `config.json`, processor configs, remote-code `.py`
    files, `README.md` and `plots/`. A folder without `README.md` gets a minimal card
    ([`~hf_uq.hub.minimal_model_card`]) in the commit; the folder itself is not changed.

    Args:
        folder (`str` or `os.PathLike`):
            The saved model folder (checked by [`check_model_folder`]).
        repo_id (`str`):
            `"namespace/name"`, or `"name"` for the token's own namespace.
        token (`bool` or `str`, *optional*):
            A Hub token; default: the locally saved one.
        private (`bool`, *optional*):
            Create the repository private (ignored when it exists).
        revision (`str`, *optional*):
            The branch to commit to (created from the default branch when missing).
        create_pr (`bool`, *optional*, defaults to `False`):
            Open a pull request instead of committing to the branch.
        commit_message (`str`, *optional*), commit_description (`str`, *optional*):
            The commit's summary and description.
        create_repo (`bool`, *optional*, defaults to `True`):
            Create the repository first (nothing happens when it exists) and use the id the Hub returns, with the
            namespace filled in; `False` when the caller did so already.

    Returns:
        `huggingface_hub.CommitInfo`: the commit (its `commit_url`, `oid`, and `pr_url` with `create_pr`).
    """
    check_model_folder(folder)
    files = folder_files(folder)
    api = HfApi()
    if create_repo:
        repo_id = api.create_repo(repo_id, token=token, private=private, exist_ok=True).repo_id
    operations = [CommitOperationAdd(path_in_repo=path, path_or_fileobj=str(local)) for path, local in files.items()]
    if "README.md" not in files:
        card = minimal_model_card(model_dir=folder, model_id=repo_id)
        operations.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=str(card).encode("utf-8")))
    if revision is not None and not revision.startswith("refs/pr"):
        api.create_branch(repo_id, branch=revision, token=token, exist_ok=True)
    return api.create_commit(
        repo_id,
        operations,
        commit_message=commit_message or "Upload model with its uncertainty card (hf_uq)",
        commit_description=commit_description,
        token=token,
        revision=revision,
        create_pr=create_pr,
    )


def _source_folder(model: Any) -> Path | None:
    name = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", None)
    return Path(name) if name and Path(name).is_dir() else None


def model_card_for(model: Any, repo_id: str | None = None) -> ModelCard:
    """The card [`push_model`] uploads with `model` (see the module docstring for the order)."""
    card = getattr(model, "uncertainty_card", None)
    if isinstance(card, ModelCard):
        return card
    if isinstance(card, (str, os.PathLike)):
        if os.path.isfile(card):
            path = Path(card)
            loaded = ModelCard.load(path)
            loaded.hf_uq_plots = plot_files(path.parent / "plots")
            return loaded
        loaded = ModelCard(str(card))
        loaded.hf_uq_plots = []
        return loaded
    if card is not None:
        raise TypeError(f"model.uncertainty_card must be a ModelCard, a card's text or a path, got {type(card).__name__}")
    source = _source_folder(model)
    if source is not None and (source / "README.md").is_file():
        loaded = ModelCard.load(source / "README.md")
        loaded.hf_uq_plots = plot_files(source / "plots")
        return loaded
    return minimal_model_card(model.config, model_id=repo_id)


def push_model(
    model: Any,
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
) -> CommitInfo:
    """
    Save `model` (with its remote code) into a temporary folder, add its card and the processor config of the
    folder it was loaded from, and push everything in one commit with [`push_folder`]. The arguments are those of
    `transformers.PreTrainedModel.push_to_hub`; `tags` (and `model.model_tags`) are added to the card's tags.
    """
    # the repository first: its full id ("namespace/name") goes into a minimal card's usage snippet
    repo_id = HfApi().create_repo(repo_id, token=token, private=private, exist_ok=True).repo_id
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, max_shard_size=max_shard_size)
        source = _source_folder(model)
        for name in PROCESSOR_FILES:  # with the processor's remote code, when it has some
            if source is None or not (source / name).is_file() or os.path.exists(os.path.join(tmp, name)):
                continue
            shutil.copyfile(source / name, os.path.join(tmp, name))
            todo = auto_map_modules(source / name)
            while todo:  # each module and, transitively, the flat `from .x import` modules it needs
                file = todo.pop()
                if os.path.exists(os.path.join(tmp, file)) or not (source / file).is_file():
                    continue
                shutil.copyfile(source / file, os.path.join(tmp, file))
                text = (source / file).read_text(encoding="utf-8")
                todo.extend(f"{m}.py" for m in re.findall(r"^\s*from \.(\w+) import", text, flags=re.M))
        chosen = model_card_for(model, repo_id)
        card = ModelCard(str(chosen))  # a copy: the tags below must not change the caller's card
        card.hf_uq_plots = getattr(chosen, "hf_uq_plots", None) or []
        all_tags = list(card.data.tags or [])
        for tag in [*(getattr(model, "model_tags", None) or []), *(tags or [])]:
            if tag not in all_tags:
                all_tags.append(tag)
        card.data.tags = all_tags or None
        save_card(card, tmp)
        return push_folder(
            tmp, repo_id, token=token, private=private, revision=revision, create_pr=create_pr,
            commit_message=commit_message or f"Upload {type(model).__name__} with its uncertainty card (hf_uq)",
            commit_description=commit_description, create_repo=False,
        )
