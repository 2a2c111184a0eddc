"""Load a published checkpoint folder into a :class:`~dilaserve.model.native.NativeDiffusionLM`.

A folder as the model's authors publish it holds ``config.json``, the weights as
safetensors (one ``model.safetensors``, or shards listed by
``model.safetensors.index.json``) and the tokenizer files. A :class:`Family` says how to
read its config into a :class:`NativeSpec` and which published tensors make each native
parameter (:mod:`dilaserve.model.family`) (a fused projection is several published tensors stacked along rows). The
loader checks the folder's tensor names against that map before reading anything, so a
wrong or truncated download fails at once with the tensors that are missing or
unexpected, not with a shape error deep inside a layer.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from . import dream, llada
from .family import Family
from .native import NativeDiffusionLM

INDEX = "model.safetensors.index.json"
#: Names listed in an error before "... and N more".
SHOWN = 8
#: Saved buffers that some exporters add and the native modules recompute from the config.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class CheckpointError(ValueError):
    """A checkpoint path that cannot be loaded, with what to do about it."""


def families() -> dict[str, Family]:
    """The native families by name."""
    return {f.name: f for f in (llada.FAMILY, dream.FAMILY)}


def family_of(config: dict) -> Family | None:
    """The native family of a parsed config.json, or None for any other model."""
    model_type = str(config.get("model_type", "")).lower()
    return next((f for f in families().values() if model_type in f.model_types), None)


def read_config(path: Path) -> dict:
    try:
        return json.loads((path / "config.json").read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{str(path)!r} has no config.json: it is not a Hugging Face checkpoint folder") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}/config.json is not valid JSON ({e}): the checkpoint is corrupt") from e


def tensor_files(path: Path) -> dict[str, Path]:
    """Every tensor name in the folder and the safetensors file that holds it."""
    from safetensors import safe_open

    index = path / INDEX
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map") or {}
        files = {name: path / f for name, f in weight_map.items()}
        absent = sorted({str(f.name) for f in files.values() if not f.is_file()})
        if absent:
            raise CheckpointError(
                f"{path}: {INDEX} lists shards that are not in the folder: {', '.join(absent[:SHOWN])}; "
                "the download is incomplete, fetch the missing files"
            )
        return files
    shards = sorted(path.glob("*.safetensors"))
    if not shards:
        bins = sorted(p.name for p in path.glob("*.bin"))
        hint = f" (it has {', '.join(bins[:3])}: re-save the model with safe_serialization=True)" if bins else ""
        raise CheckpointError(f"{path} has no *.safetensors weights{hint}")
    files = {}
    for shard in shards:
        with safe_open(str(shard), framework="pt") as f:
            files.update({name: shard for name in f.keys()})
    return files


def _listed(names) -> str:
    names = sorted(names)
    more = f" ... and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def check_tensor_names(path: Path, family: str, expected: set[str], found: set[str]) -> None:
    """Raise naming every missing and unexpected tensor (expected: what the family's map needs)."""
    missing, unexpected = expected - found, found - expected
    if not missing and not unexpected:
        return
    parts = []
    if missing:
        parts.append(f"missing {len(missing)} tensor(s): {_listed(missing)}")
    if unexpected:
        parts.append(f"unexpected {len(unexpected)} tensor(s): {_listed(unexpected)}")
    raise CheckpointError(
        f"{path} does not match the published {family} layout its config.json describes: "
        + "; ".join(parts)
        + ". Check that config.json belongs to these weights and that every "
        "shard was downloaded"
    )


def load_native(path: str | Path, device: str = "cpu", dtype: torch.dtype | None = None) -> NativeDiffusionLM:
    """Build the native model of a LLaDA or Dream folder and read its weights.

    ``dtype`` defaults to float32 on CPU and bfloat16 on GPU (the published weights are
    bfloat16).
    """
    from safetensors import safe_open

    path = Path(path)
    config = read_config(path)
    family = family_of(config)
    if family is None:
        raise CheckpointError(
            f"{path}: model_type {config.get('model_type')!r} is not a native family ({', '.join(sorted(families()))})"
        )
    try:
        spec = family.spec_from_config(config)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}/config.json: {e}") from e
    weight_map = family.weight_map(spec)
    files = tensor_files(path)
    found = {n for n in files if not n.endswith(IGNORED_SUFFIXES)}
    check_tensor_names(path, family.name, {n for parts in weight_map.values() for n in parts}, found)
    if dtype is None:
        dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    with torch.device("meta"):
        model = NativeDiffusionLM(spec).to(dtype)
    model.to_empty(device=device)
    if spec.tie_embeddings:  # to_empty gives every parameter fresh storage, so tie again
        model.head.weight = model.embed.weight
    by_file: dict[Path, list[str]] = {}
    for parts in weight_map.values():
        for name in parts:
            by_file.setdefault(files[name], []).append(name)
    # Shard by shard, so host memory holds about one shard at a time (a fused projection's
    # parts may straddle two shards: it is written once all of them are read).
    pending, todo = {}, dict(weight_map)
    with torch.no_grad():
        for file, names in by_file.items():
            with safe_open(str(file), framework="pt") as f:
                pending.update({n: f.get_tensor(n) for n in names})
            for target, parts in list(todo.items()):
                if all(n in pending for n in parts):
                    _assign(path, model.get_parameter(target), [pending.pop(n) for n in parts], parts)
                    del todo[target]
    return model.eval()


def _assign(path: Path, param: torch.Tensor, values: list[torch.Tensor], parts: tuple[str, ...]) -> None:
    value = torch.cat(values) if len(values) > 1 else values[0]
    if value.shape != param.shape:
        raise CheckpointError(
            f"{path}: {' + '.join(parts)} has shape {tuple(value.shape)} but config.json implies "
            f"{tuple(param.shape)}: the config and the weights disagree"
        )
    param.copy_(value)
