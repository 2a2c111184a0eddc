"""What a published model family is: how its folder's config and tensors are read.

A :class:`Family` says how to read a folder's ``config.json`` into a
:class:`~dilaserve.model.native.NativeSpec` and which published tensors make each native
parameter. ``llada.py`` and ``dream.py`` each define one; ``checkpoint.py`` lists them and
loads a folder with its family's. Kept apart from both so that the families and the loader
import it, and not each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .native import NativeSpec

#: native parameter name -> the published tensors stacked (along rows) to make it
WeightMap = dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class Family:
    """One published model family: how its folder is read."""

    name: str
    #: ``model_type`` values of its config.json (compared in lower case)
    model_types: tuple[str, ...]
    mask_id: int
    logit_shift: bool
    spec_from_config: Callable[[dict], NativeSpec]
    weight_map: Callable[[NativeSpec], WeightMap]
