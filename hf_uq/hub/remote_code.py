"""Self-contained remote code for hf_uq models and image processors.

`save_pretrained` of every hf_uq model (and of [`DuoImageProcessor`]) writes, next to the weights,
the Python files that define it and an `auto_map`, so that

```python
AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True)
```

loads it where hf_uq is not installed. transformers' dynamic-module loader copies the file named in
`auto_map` and, recursively, every file it imports as `from .name import ...`, all from the same flat
folder; every other (absolute) import must be importable in the loading environment.

The bundler follows the import graph of hf_uq modules only, starting from the modules that define the
saved classes, and rewrites each hf_uq import (relative or absolute, at module level or inside a
function) into a flat relative import:

```python
from ...functional.scores import entropy    # hf_uq/models/duo/modeling_duo.py
from .scores import entropy                  # modeling_duo.py in the saved folder
```

Names imported from a package (`from ..functional import ece`) are traced through the package's
`__init__.py` to the module that defines them, so the bundle holds only what is imported. Every flat
file name is the module's own name unless another hf_uq module shares it; then enough parent package
names are prefixed to tell them apart (`duo_utils.py`, `layers_utils.py`). Names are computed over the
whole hf_uq source tree, so a model and its processor saved into one folder never disagree about them.

Limits (each raises [`RemoteCodeError`] naming the file and line):

- `import hf_uq...` statements and `from <package> import <submodule>` (a module object) are not
  supported: import names from modules instead;
- every non-hf_uq import of a bundled module must be the standard library or one of
  [`REMOTE_CODE_PACKAGES`] (imports inside `try:` blocks are exempt, as in transformers' own check);
- an hf_uq model whose members are themselves hf_uq models still needs hf_uq to load its members.

Classes defined outside hf_uq (a user's subclass) are saved without remote code.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "REMOTE_CODE_PACKAGES",
    "RemoteCodeBundle",
    "RemoteCodeError",
    "build_remote_code",
    "remote_code_classes",
    "save_pretrained_with_remote_code",
]

ROOT_PACKAGE = "hf_uq"
_ROOT_DIR = Path(__file__).resolve().parents[1]

#: Third-party packages a bundled module may import: what any environment able to run an hf_uq model
#: through transformers has (transformers' own dependencies, torch, scipy, Pillow).
REMOTE_CODE_PACKAGES = frozenset(
    {
        "numpy",
        "scipy",
        "torch",
        "transformers",
        "huggingface_hub",
        "safetensors",
        "tqdm",
        "packaging",
        "PIL",
    }
)

_MODEL_AUTO_CLASSES = ("AutoModel", "AutoModelForImageClassification")


class RemoteCodeError(RuntimeError):
    """An hf_uq module cannot be turned into self-contained remote code."""


@dataclass(frozen=True)
class RemoteCodeBundle:
    """
    The flat, self-contained copy of some hf_uq modules.

    Args:
        files (`dict[str, str]`):
            File name (`"modeling_duo.py"`) to rewritten source, sorted by file name.
        module_names (`dict[str, str]`):
            Dotted hf_uq module name (`"hf_uq.models.duo.modeling_duo"`) to flat module name (`"modeling_duo"`).
    """

    files: dict[str, str]
    module_names: dict[str, str]

    def reference(self, cls: type) -> str:
        """The `auto_map` entry of a bundled class: `"<flat module>.<class name>"`."""
        if cls.__module__ not in self.module_names:
            raise RemoteCodeError(f"{cls.__module__}.{cls.__qualname__} is not part of this bundle")
        return f"{self.module_names[cls.__module__]}.{cls.__qualname__}"

    def write(self, directory: str | os.PathLike) -> list[str]:
        """Write every file into `directory` (created if needed); returns the written paths."""
        os.makedirs(directory, exist_ok=True)
        paths = []
        for name, source in self.files.items():
            path = os.path.join(directory, name)
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(source)
            paths.append(path)
        return paths


def is_hf_uq_module(module: str) -> bool:
    return module == ROOT_PACKAGE or module.startswith(ROOT_PACKAGE + ".")


def remote_code_classes(obj: Any) -> dict[str, type]:
    """The `auto_map` classes of a model (`AutoConfig`, `AutoModel`, `AutoModelForImageClassification`)
    or of an image processor (`AutoImageProcessor`)."""
    from transformers import PreTrainedModel
    from transformers.image_processing_base import ImageProcessingMixin

    if isinstance(obj, PreTrainedModel):
        return {"AutoConfig": type(obj.config), **dict.fromkeys(_MODEL_AUTO_CLASSES, type(obj))}
    if isinstance(obj, ImageProcessingMixin):
        return {"AutoImageProcessor": type(obj)}
    raise TypeError(
        f"no remote code for {type(obj).__name__}: expected a model or an image processor"
    )


# ----------------------------------------------------------------------------------------------
# The hf_uq source tree


@cache
def _tree() -> dict[str, tuple[Path, bool]]:
    """Every hf_uq module: dotted name -> (source file, is a package)."""
    modules = {}
    for path in sorted(_ROOT_DIR.rglob("*.py")):
        parts = path.relative_to(_ROOT_DIR).with_suffix("").parts
        if "__pycache__" in parts or not all(p.isidentifier() for p in parts):
            continue
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join((ROOT_PACKAGE, *parts))] = (path, is_package)
    return modules


def _flat_names(modules: Iterable[str]) -> dict[str, str]:
    """Flat module names, unique over the given modules: the shortest distinguishing suffix of each
    dotted name, joined by `_`; the full dotted path where joined suffixes still coincide."""
    parts = {m: tuple(m.split(".")[1:]) or (ROOT_PACKAGE,) for m in modules}
    suffix_counts: Counter = Counter()
    for p in parts.values():
        for k in range(1, len(p) + 1):
            suffix_counts[p[-k:]] += 1
    names = {}
    for m, p in parts.items():
        k = next((k for k in range(1, len(p) + 1) if suffix_counts[p[-k:]] == 1), len(p))
        names[m] = "_".join(p[-k:])
    clashes = Counter(names.values())
    for m, name in names.items():
        if clashes[name] > 1:
            names[m] = "_".join((ROOT_PACKAGE, *parts[m]))
    return names


@cache
def _parse(module: str) -> tuple[str, ast.Module]:
    path = _tree()[module][0]
    source = path.read_text(encoding="utf-8")
    return source, ast.parse(source, filename=str(path))


def _where(module: str, node: ast.AST) -> str:
    return f"{_tree()[module][0]}:{getattr(node, 'lineno', '?')}"


def _resolve_target(module: str, node: ast.ImportFrom) -> str | None:
    """The absolute module a `from ... import` names, or None when it is not an hf_uq module."""
    if node.level == 0:
        return node.module if node.module and is_hf_uq_module(node.module) else None
    package = module if _tree()[module][1] else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    if not package:
        raise RemoteCodeError(
            f"{_where(module, node)}: relative import beyond the top-level package"
        )
    return f"{package}.{node.module}" if node.module else package


def _exported_from(package: str, name: str, seen: frozenset = frozenset()) -> tuple[str, str]:
    """Follow a name re-exported by a package `__init__` to the module defining it: (module, name)."""
    if (package, name) in seen:
        return package, name
    _, tree = _parse(package)
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) != name or alias.name == "*":
                continue
            target = _resolve_target(package, node)
            if target is None or target not in _tree():
                return package, name
            if _tree()[target][1]:
                if f"{target}.{alias.name}" in _tree():
                    return package, name
                return _exported_from(target, alias.name, seen | {(package, name)})
            return target, alias.name
    return package, name


def _imported_names(
    module: str, node: ast.ImportFrom, target: str
) -> list[tuple[str, str, str | None]]:
    """(defining module, name, alias) for every name of an hf_uq `from ... import`."""
    if target not in _tree():
        raise RemoteCodeError(f"{_where(module, node)}: {target} is not a module of {ROOT_PACKAGE}")
    result = []
    for alias in node.names:
        if alias.name == "*":
            raise RemoteCodeError(
                f"{_where(module, node)}: `import *` from {target} cannot be bundled"
            )
        if _tree()[target][1]:
            if f"{target}.{alias.name}" in _tree():
                raise RemoteCodeError(
                    f"{_where(module, node)}: `from {target} import {alias.name}` imports a module object; "
                    f"import the names you need from {target}.{alias.name} instead"
                )
            owner, name = _exported_from(target, alias.name)
        else:
            owner, name = target, alias.name
        result.append(
            (
                owner,
                name,
                alias.asname if alias.asname else (alias.name if name != alias.name else None),
            )
        )
    return result


def _hf_uq_imports(module: str) -> list[tuple[ast.ImportFrom, list[tuple[str, str, str | None]]]]:
    """Every hf_uq import of a module, at any depth, with its resolved names."""
    found = []
    for node in ast.walk(_parse(module)[1]):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if is_hf_uq_module(alias.name):
                    raise RemoteCodeError(
                        f"{_where(module, node)}: `import {alias.name}` cannot be bundled; use `from ... import`"
                    )
        elif isinstance(node, ast.ImportFrom):
            target = _resolve_target(module, node)
            if target is not None:
                found.append((node, _imported_names(module, node, target)))
    return sorted(found, key=lambda item: (item[0].lineno, item[0].col_offset))


def _third_party_imports(tree: ast.Module) -> list[tuple[str, int]]:
    """(top-level package, line) of every absolute import outside `try:` blocks, as transformers checks."""
    found = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Try):
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name.split(".")[0], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


# ----------------------------------------------------------------------------------------------
# Building a bundle


def _collect(entries: Iterable[str]) -> list[str]:
    """The entry modules and every hf_uq module they import, transitively, sorted."""
    todo = sorted(set(entries))
    for entry in todo:
        if entry not in _tree():
            raise RemoteCodeError(
                f"{entry} is not a module of {ROOT_PACKAGE} (found under {_ROOT_DIR})"
            )
    seen = set(todo)
    while todo:
        module = todo.pop()
        for _, names in _hf_uq_imports(module):
            for owner, _, _ in names:
                if owner not in seen:
                    seen.add(owner)
                    todo.append(owner)
    return sorted(seen)


def _rewrite(module: str, flat: Mapping[str, str]) -> str:
    """The module's source with each hf_uq import replaced by flat relative imports, one per line."""
    source, _ = _parse(module)
    lines = source.splitlines(keepends=True)
    for node, names in reversed(_hf_uq_imports(module)):
        start, end = node.lineno - 1, node.end_lineno - 1
        indent = lines[start][: node.col_offset]
        if indent.strip() or lines[end][node.end_col_offset :].strip():
            raise RemoteCodeError(
                f"{_where(module, node)}: an hf_uq import must be alone on its line(s) to be rewritten"
            )
        by_owner: dict[str, list[str]] = {}
        for owner, name, alias in names:
            by_owner.setdefault(owner, []).append(f"{name} as {alias}" if alias else name)
        statements = [
            f"{indent}from .{flat[owner]} import {', '.join(items)}\n"
            for owner, items in by_owner.items()
        ]
        lines[start : end + 1] = statements
    return "".join(lines)


def _check_dependencies(module: str, source: str) -> None:
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    for package, line in _third_party_imports(ast.parse(source)):
        if package in stdlib or package in REMOTE_CODE_PACKAGES or package == "__future__":
            continue
        raise RemoteCodeError(
            f"{_tree()[module][0]}:{line} imports {package!r}, which a remote-code environment need not have "
            f"(allowed besides the standard library: {sorted(REMOTE_CODE_PACKAGES)}); import it lazily "
            "inside a `try:` block or keep this module out of the model's import graph"
        )


def build_remote_code(entry_modules: Iterable[str]) -> RemoteCodeBundle:
    """
    Bundle hf_uq modules and their hf_uq dependencies into flat, self-contained files.

    Args:
        entry_modules (`Iterable[str]`):
            Dotted names of the modules defining the saved classes, e.g. `cls.__module__`.

    Returns:
        [`RemoteCodeBundle`]: the rewritten files, deterministic for a given hf_uq source tree.

    Raises:
        [`RemoteCodeError`]: when a module is outside hf_uq or cannot be bundled (see the module docstring).
    """
    _tree.cache_clear()  # read the source as it is now (it may have been edited since the last save)
    _parse.cache_clear()
    modules = _collect(entry_modules)
    flat = _flat_names(_tree())
    version = getattr(sys.modules.get(ROOT_PACKAGE), "__version__", "unknown")
    files = {}
    for module in modules:
        source = _rewrite(module, flat)
        _check_dependencies(module, source)
        header = (
            f"# Generated by hf_uq {version} from {module}: edit the hf_uq source, not this copy.\n"
        )
        files[f"{flat[module]}.py"] = header + source
    return RemoteCodeBundle(
        files=dict(sorted(files.items())), module_names={m: flat[m] for m in modules}
    )


# ----------------------------------------------------------------------------------------------
# Saving


def _auto_map_target(obj: Any) -> Any:
    from transformers import PreTrainedModel

    return obj.config if isinstance(obj, PreTrainedModel) else obj


_MISSING = object()
_PUSH_KWARGS = ("commit_message", "commit_description", "private", "token", "revision", "create_pr")


def save_pretrained_with_remote_code(
    obj: Any, save: Callable[..., Any], save_directory: str | os.PathLike, *args: Any, **kwargs: Any
) -> Any:
    """
    Run a `save_pretrained` and add self-contained remote code and an `auto_map` to what it writes.

    Models get `AutoConfig`, `AutoModel` and `AutoModelForImageClassification` in `config.json`; image
    processors get `AutoImageProcessor` in `preprocessor_config.json`. The object itself is left unchanged.
    When the classes are not hf_uq's (a user's subclass) or cannot be bundled, the folder is saved without
    remote code (with a warning in the second case).

    Args:
        obj (`PreTrainedModel` or `ImageProcessingMixin`):
            What is saved.
        save (`Callable`):
            The transformers `save_pretrained` to run (the caller's `super().save_pretrained`).
        save_directory (`str` or `os.PathLike`):
            The folder.
        args, kwargs:
            Passed to `save`. With `push_to_hub=True` the folder is saved first and then uploaded through
            `obj.push_to_hub` (transformers uploads only files that change while it saves, which would
            miss the remote code).
    """
    classes = remote_code_classes(obj)
    if not all(is_hf_uq_module(cls.__module__) for cls in classes.values()):
        return save(save_directory, *args, **kwargs)
    try:
        bundle = build_remote_code(cls.__module__ for cls in classes.values())
    except RemoteCodeError as err:
        warnings.warn(
            f"saving {type(obj).__name__} without remote code: {err}", RuntimeWarning, stacklevel=3
        )
        return save(save_directory, *args, **kwargs)

    bound = inspect.signature(save).bind(save_directory, *args, **kwargs)
    var_kw = next(
        (p.name for p in inspect.signature(save).parameters.values() if p.kind is p.VAR_KEYWORD),
        None,
    )
    extra = bound.arguments.get(var_kw, {}) if var_kw else {}
    push_kwargs = None
    if bound.arguments.get("push_to_hub", False):
        bound.arguments["push_to_hub"] = False
        push_kwargs = {k: extra.pop(k) for k in _PUSH_KWARGS if k in extra}
        push_kwargs["repo_id"] = extra.pop(
            "repo_id", os.path.basename(os.path.normpath(save_directory))
        )

    target = _auto_map_target(obj)
    previous = target.__dict__.get("auto_map", _MISSING)
    auto_map = {auto_class: bundle.reference(cls) for auto_class, cls in classes.items()}
    if "AutoImageProcessor" in auto_map:
        # the (pil, torchvision) list form, not a plain string: transformers 5's AutoVideoProcessor (which
        # the image-classification pipeline tries too) turns a string entry into "...VideoProcessor" and
        # asks for trust_remote_code even when hf_uq is installed; on a list it fails quietly instead
        auto_map["AutoImageProcessor"] = [auto_map["AutoImageProcessor"], None]
    target.auto_map = {**(previous if isinstance(previous, dict) else {}), **auto_map}
    try:
        result = save(*bound.args, **bound.kwargs)
    finally:
        if previous is _MISSING:
            del target.auto_map
        else:
            target.auto_map = previous
    if bound.arguments.get("is_main_process", True):
        bundle.write(save_directory)
        if push_kwargs is not None:
            obj.push_to_hub(push_kwargs.pop("repo_id"), **push_kwargs)
    return result
