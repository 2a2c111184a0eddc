"""The unmask rule on the device, with one small copy to the host per step.

:func:`~dilaserve.engine.unmask.select_commits` (numpy) is the rule's definition and this
module's test oracle; here the same rule runs on the step's logits where they are: top-1
token and probability per position, then every position at or above the request's threshold,
or, where none is, the single most confident one. What comes back to the host is three small
rows per request (confidences, tokens, which to commit), in one transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Commits:
    """One step's outcome per request row, on the host; columns ``k < n`` of a row are its
    candidates (the block's masked positions), the rest padding."""

    confidence: np.ndarray  # (B, P) float32: top-1 probability
    token: np.ndarray  # (B, P) int64: top-1 token
    commit: np.ndarray  # (B, P) bool: the rule's choice


def top1(logits: torch.Tensor, banned: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-1 probability (float32) and token of (B, P, V) logits, never a ``banned`` id."""
    logits = logits.float().index_fill(-1, banned, -torch.inf)
    # top-1 probability = exp(max - logsumexp): two passes over the vocabulary and no
    # probability tensor, which at 126k-152k entries per position is most of the cost
    top, tok = logits.max(dim=-1)
    return torch.exp(top - torch.logsumexp(logits, dim=-1)), tok


def commit_mask(conf: torch.Tensor, valid: torch.Tensor, thresholds: torch.Tensor) -> torch.Tensor:
    """The unmask rule over (B, P) confidences: ``valid`` positions at or above the row's
    threshold (float64, so that a threshold such as 0.9 compares as the host's does), else
    the first most confident valid one."""
    sure = valid & (conf.double() >= thresholds[:, None])
    best = torch.where(valid, conf, -1.0).argmax(dim=1, keepdim=True)
    only = torch.zeros_like(valid).scatter_(1, best, True) & valid
    return torch.where(sure.any(dim=1, keepdim=True), sure, only)


def select_on_device(logits: torch.Tensor, counts: list[int], thresholds: list[float], banned: torch.Tensor) -> Commits:
    """The rule for each row of (B, P, V) logits whose first ``counts[b]`` columns are
    candidates, at ``thresholds[b]`` (``inf``: the single most confident one); ``banned``
    ids (on the logits' device) are never chosen."""
    dev = logits.device
    conf, tok = top1(logits, banned)
    # one copy in: the counts and thresholds of every row, float64 holds both exactly
    per_row = torch.from_numpy(np.array([counts, thresholds], dtype=np.float64)).to(dev, non_blocking=True)
    valid = torch.arange(conf.shape[1], device=dev)[None, :] < per_row[0][:, None]
    commit = commit_mask(conf, valid, per_row[1])
    # one copy out: a float64 holds a float32 confidence and a token id (< 2**53) exactly
    host = torch.stack((conf.double(), tok.double(), commit.double())).cpu().numpy()
    return Commits(host[0].astype(np.float32), host[1].astype(np.int64), host[2] > 0)
