"""A request's K/V cache as bytes, for shipping a block-causal request's exact cache to the
instance it migrates to (docs/architecture.md, "Block-diffusion models")."""

from __future__ import annotations

import json
import struct

import numpy as np
import torch


def cache_to_bytes(kv: torch.Tensor) -> bytes:
    """A JSON header (dtype, shape) and the raw values: one copy off the device, none more."""
    arr = kv.detach().contiguous().cpu()
    if arr.dtype is torch.bfloat16:  # numpy has no bfloat16: ship its bits
        raw, dtype = arr.view(torch.int16).numpy(), "bfloat16"
    else:
        raw, dtype = arr.numpy(), str(arr.dtype).removeprefix("torch.")
    head = json.dumps({"dtype": dtype, "shape": list(arr.shape)}).encode()
    return struct.pack("<I", len(head)) + head + raw.tobytes()


def cache_from_bytes(blob: bytes, device: torch.device | str = "cpu") -> torch.Tensor:
    """The tensor :func:`cache_to_bytes` wrote, on ``device``."""
    (n,) = struct.unpack_from("<I", blob)
    head = json.loads(blob[4 : 4 + n])
    body = memoryview(blob)[4 + n :]
    if head["dtype"] == "bfloat16":
        t = torch.from_numpy(np.frombuffer(body, dtype=np.int16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.frombuffer(body, dtype=np.dtype(head["dtype"])).copy())
    return t.view(*head["shape"]).to(device)
