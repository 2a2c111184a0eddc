"""Train the embedded masked-diffusion model on the synthetic task suite.

    python -m dilaserve.model.train --out data/checkpoints/my-run --max-minutes 30

Objective (masked diffusion, as LLaDA's SFT): draw a mask ratio t ~ U(eps, 1)
per example, mask each *response* token with probability t, and take the
cross-entropy on masked tokens weighted by 1/t, normalised by the response
length. The prompt is never masked. Training answers are random valid
answers (shuffled items, sampled forms), so the model learns the genuinely
multi-modal answer distribution that makes low thresholds risky.

Variable canvas: a share of the batches (``--extra-eos-share``) follow the
answer with a random number of extra ``[EOS]`` blocks, up to the context limit,
as LLaDA's SFT pads its answers. The model then answers in any canvas at least
as long as its answer, and a client's generous ``max_tokens`` is an upper bound
rather than a length the answer must fill.

Decode-shaped masks: a share of the sequences (``--decode-mask-share``) is masked
item by item instead of token by token: each item (and the EOS tail) is either
written or pending, as the canvas of a threshold decode is, where items are
committed as units. Token-by-token masking almost never shows "all items but two
written, those two open", yet that is the state where a decode at threshold 0.7
decides between two equally likely items; trained on it, the model learns to split
its confidence between them instead of committing the same item twice. The mask
never depends on the answer's content (every item of a task has the same length),
so the conditionals the loss targets are unchanged.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from tqdm import tqdm

from dilaserve.tasks import BLOCK_LENGTH, TASKS, Task
from dilaserve.utils.cli import option, parse_dataclass

from .configuration import DiLaConfig
from .modeling import DiLaForMaskedDiffusion
from .tokenizer import build_tokenizer


@dataclass
class TrainConfig:
    """Training hyperparameters (each is a ``--kebab-case`` flag)."""

    out: str = option(
        "data/checkpoints/run", "folder the checkpoint (weights, config, tokenizer, train log) is written to"
    )
    max_steps: int = option(8000, "optimizer steps; the cosine learning-rate schedule spans them")
    max_minutes: float = option(45.0, "wall-clock budget; training stops early (and saves) when it runs out")
    batch_size: int = option(64, "sequences per optimizer step")
    lr: float = option(2e-3, "peak learning rate")
    warmup_steps: int = option(300, "linear warm-up steps")
    weight_decay: float = option(0.01, "AdamW weight decay")
    eps: float = option(
        0.05,
        "lower bound of the mask ratio t ~ U(eps, 1); it also bounds the 1/t loss weight, whose variance slows a small model down",
    )
    seed: int = option(0, "seed for data, masking and initialisation")
    save_every_minutes: float = option(5.0, "also save a checkpoint this often while training")
    hidden_size: int = option(128, "model width")
    num_layers: int = option(4, "transformer blocks")
    num_heads: int = option(4, "attention heads")
    intermediate_size: int = option(384, "SwiGLU width")
    max_position_embeddings: int = option(256, "longest canvas (prompt + generation)")
    tasks: list[str] = option(sorted(TASKS), "task names to train on; a name given twice is drawn twice as often")
    curriculum_steps: int = option(
        800,
        "first steps mask the whole answer and skip the loss on end-of-sequence padding: a small model "
        "that learns where answers end before what they say stalls on copying the prompt",
    )
    task_stages: list[str] = option(
        ["300:list", "1200:list+pairs"],
        "task curriculum, entries STEP:task+task: before STEP, train only on those tasks (after the last "
        "entry, on all of --tasks); copying the prompt is learned on the simplest task first, and mixing in "
        "harder tasks from the start delays it by thousands of steps",
    )
    extra_eos_share: float = option(
        0.5,
        "share of batches whose canvas gets 1 to N extra blocks of [EOS] after the answer (N: as many as the "
        "context holds), so the model answers in any canvas at least as long as its answer; 0 trains every answer "
        "in its own canvas only",
    )
    decode_mask_share: float = option(
        0.0,
        "share of sequences masked item by item (each item and the EOS tail written or pending, pending ones "
        "masked at a rate drawn in [0.5, 1]) instead of token by token: the states a threshold decode passes "
        "through, where the model must tell which items are still open",
    )
    block_causal: bool = option(
        False,
        "train the block-diffusion variant (DiLaConfig.block_causal): each sequence is cut after a random "
        "answer block, which alone is noised, and attends to the prompt and the clean blocks before it; "
        "--extra-eos-share does not apply (a block-diffusion answer ends at its first block with an EOS)",
    )
    init_from: str = option("", "start from the weights of this checkpoint folder (fresh optimizer) instead of random")
    threads: int = option(0, "torch intra-op threads (0: torch's default); 1 is faster on a shared machine")
    note: str = option("", "one line on what this run changed, for the model card's runs table")

    def __post_init__(self) -> None:
        unknown = set(self.tasks) - set(TASKS)
        if unknown:
            raise ValueError(f"unknown tasks {sorted(unknown)}: choose from {sorted(TASKS)}")
        self._stages = self.stages()  # validated once; tasks_at runs every optimizer step
        if self.max_steps < 1 or self.batch_size < 1:
            raise ValueError("max_steps and batch_size must be at least 1")
        if not 0.0 <= self.extra_eos_share <= 1.0:
            raise ValueError(f"--extra-eos-share {self.extra_eos_share} must lie in [0, 1], e.g. 0.5")
        if not 0.0 <= self.decode_mask_share <= 1.0:
            raise ValueError(f"--decode-mask-share {self.decode_mask_share} must lie in [0, 1], e.g. 0.5")

    def stages(self) -> list[tuple[int, list[str]]]:
        """``task_stages`` parsed into ``(end_step, task names)``, ascending."""
        out: list[tuple[int, list[str]]] = []
        for entry in self.task_stages:
            step, sep, names = entry.partition(":")
            tasks = names.split("+") if sep else []
            if not step.isdigit() or not tasks or set(tasks) - set(self.tasks):
                raise ValueError(
                    f"bad --task-stages entry {entry!r}: write STEP:task+task with tasks from --tasks "
                    f"({'+'.join(sorted(set(self.tasks)))}), e.g. 300:list"
                )
            if out and int(step) <= out[-1][0]:
                raise ValueError(f"--task-stages steps must increase: {entry!r} follows step {out[-1][0]}")
            out.append((int(step), tasks))
        return out

    def tasks_at(self, step: int) -> list[str]:
        """Tasks trained on at optimizer step ``step``."""
        return next((tasks for end, tasks in self._stages if step < end), self.tasks)


class Batch(NamedTuple):
    noisy: torch.Tensor  # (B, T) prompt + response with masked positions replaced by [MASK]
    attention: torch.Tensor  # (B, T) True on real tokens
    targets: torch.Tensor  # (B, T) clean tokens
    masked: torch.Tensor  # (B, T) True where the loss applies
    t: torch.Tensor  # (B, 1) mask ratio per sequence
    gen_length: int  # response canvas length (shared by the batch)
    #: the task's own canvas (without extra EOS blocks): the loss's normaliser, so extra
    #: blocks add their (easy) EOS loss without diluting the answer's
    loss_length: int
    weight: torch.Tensor  # (B, T) loss weight: 0 on EOS padding during the curriculum
    prompt_lengths: torch.Tensor  # (B,) for the model's prompt isolation


def extra_blocks(rng: random.Random, share: float, room: int) -> int:
    """Extra EOS blocks for one batch: none with probability ``1 - share``, else 1 to ``room`` uniformly."""
    if room < 1 or rng.random() >= share:
        return 0
    return rng.randint(1, room)


def decode_shaped_mask(spans: list[tuple[int, int]], t: float, length: int, gen: torch.Generator) -> torch.Tensor:
    """One sequence's mask, unit by unit: each span ``[start, end)`` is pending with probability
    ``t``, and a pending span's tokens are masked at one rate drawn in [0.5, 1] for the sequence.
    At least one token is masked."""
    mask = torch.zeros(length, dtype=torch.bool)
    rate = 0.5 + 0.5 * torch.rand(1, generator=gen).item()
    pending = torch.rand(len(spans), generator=gen) < t
    for (start, end), p in zip(spans, pending.tolist()):
        if p:
            mask[start:end] = torch.rand(end - start, generator=gen) < rate
    if not mask.any():  # a sequence with nothing to predict would waste its share of the batch
        mask[int(torch.randint(spans[0][0], spans[-1][1], (1,), generator=gen))] = True
    return mask


def make_batch(
    tasks: list[Task],
    tok,
    batch_size: int,
    rng: random.Random,
    gen: torch.Generator,
    eps: float,
    curriculum: bool = False,
    extra_eos_share: float = 0.0,
    max_len: int = 256,
    block_causal: bool = False,
    decode_mask_share: float = 0.0,
) -> Batch:
    """One training batch of a single task and generation length (little padding).

    With probability ``extra_eos_share`` the batch's canvas grows by whole blocks of EOS
    (as many as fit in ``max_len`` tokens at most); fewer sequences then keep its token
    count, and so the step's cost, near that of an answer-sized batch.

    With ``block_causal`` the batch trains one block of a block-diffusion model: the
    sequences end after a random answer block, the blocks before it stay clean, and only
    that block is noised. Under the block-causal mask the clean blocks never see it, so
    this is exactly the view a decode has when that block is the current one.

    A ``decode_mask_share`` of the sequences is masked item by item (:func:`decode_shaped_mask`).
    """
    task = rng.choice(tasks)
    size = rng.choice(task.sizes)
    target_len = task.sample(rng, size).gen_length
    sizes = [s for s in task.sizes if task.sample(random.Random(0), s).gen_length == target_len]
    insts = [task.sample(rng, rng.choice(sizes)) for _ in range(batch_size)]
    plen = max(len(i.prompt.split()) for i in insts)
    if block_causal:
        extra = 0
        canvas = (rng.randrange(target_len // BLOCK_LENGTH) + 1) * BLOCK_LENGTH  # up to the current block
    else:
        extra = extra_blocks(rng, extra_eos_share, (max_len - plen - target_len) // BLOCK_LENGTH)
        canvas = target_len + extra * BLOCK_LENGTH
    if extra:
        insts = insts[: max(8, batch_size * (plen + target_len) // (plen + canvas))]
        batch_size = len(insts)
    prompts, responses, units = [], [], []
    eos = tok.eos_token_id
    for inst in insts:
        items = task.sample_answer_items(inst, rng)
        ans = tok.convert_tokens_to_ids([t for item in items for t in item])
        prompts.append(tok.convert_tokens_to_ids(inst.prompt.split()))
        responses.append((ans + [eos] * (max(canvas, target_len) - len(ans)))[:canvas])
        units.append(unit_spans([len(item) for item in items], len(prompts[-1]), canvas))
    T = plen + canvas
    ids = torch.full((batch_size, T), tok.pad_token_id, dtype=torch.long)
    attn = torch.zeros(batch_size, T, dtype=torch.bool)
    is_resp = torch.zeros(batch_size, T, dtype=torch.bool)
    padding = torch.zeros(batch_size, T, dtype=torch.bool)  # EOS fill after the answer's own EOS
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, : len(p)] = torch.tensor(p)
        ids[i, len(p) : len(p) + len(r)] = torch.tensor(r)
        attn[i, : len(p) + len(r)] = True
        # block-causal: only the current (last) block is noised; the blocks before it are context
        is_resp[i, len(p) + (len(r) - BLOCK_LENGTH if block_causal else 0) : len(p) + len(r)] = True
        if eos in r:
            padding[i, len(p) + r.index(eos) + 1 : len(p) + len(r)] = True
    if curriculum:
        t = torch.ones(batch_size, 1)
    else:
        t = eps + (1 - eps) * torch.rand(batch_size, 1, generator=gen)
    masked = (torch.rand(batch_size, T, generator=gen) < t) & is_resp
    if decode_mask_share and not curriculum:
        shaped = (torch.rand(batch_size, generator=gen) < decode_mask_share).nonzero().flatten().tolist()
        for i in shaped:
            masked[i] = decode_shaped_mask(units[i], float(t[i, 0]), T, gen) & is_resp[i]
    noisy = torch.where(masked, torch.full_like(ids, tok.mask_token_id), ids)
    weight = (~padding).float() if curriculum else torch.ones(batch_size, T)
    loss_length = BLOCK_LENGTH if block_causal else target_len
    return Batch(noisy, attn, ids, masked, t, canvas, loss_length, weight, torch.tensor([len(p) for p in prompts]))


def unit_spans(item_lengths: list[int], start: int, canvas: int) -> list[tuple[int, int]]:
    """Sequence positions ``[start, end)`` of each answer item and of the EOS tail after them."""
    spans, pos = [], start
    for n in item_lengths:
        spans.append((pos, pos + n))
        pos += n
    return spans + [(pos, start + canvas)]


def masked_diffusion_loss(logits, targets, masked, t, gen_length: int, weight=None) -> torch.Tensor:
    """Cross-entropy on masked tokens weighted by 1/t, per sequence over ``gen_length`` tokens, batch mean."""
    ce = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    if weight is not None:
        ce = ce * weight
    return ((ce * masked / t).sum(dim=1) / gen_length).mean()


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
    return cfg.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def save_checkpoint(model, tok, cfg: TrainConfig, log: dict) -> Path:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / "train_log.json").write_text(json.dumps({"config": asdict(cfg), **log}, indent=2))
    return out


def build_model(cfg: TrainConfig, tok) -> DiLaForMaskedDiffusion:
    """A freshly initialised model sized by ``cfg`` for the tokenizer ``tok``."""
    return DiLaForMaskedDiffusion(
        DiLaConfig(
            vocab_size=len(tok),
            hidden_size=cfg.hidden_size,
            num_layers=cfg.num_layers,
            num_heads=cfg.num_heads,
            intermediate_size=cfg.intermediate_size,
            max_position_embeddings=cfg.max_position_embeddings,
            mask_token_id=tok.mask_token_id,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
    )


def load_for_training(checkpoint: str, tok) -> DiLaForMaskedDiffusion:
    """A checkpoint to continue from, its embedding grown to the tokenizer when the task
    language has gained words since (new rows start small and random, old ids keep theirs)."""
    model = DiLaForMaskedDiffusion.from_pretrained(checkpoint)
    # calibration is fitted after training (dilaserve.model.calibrate) and leaves the weights
    # alone: training goes on from the raw logits, and the run is calibrated afresh
    model.config.logit_temperature = 1.0
    if model.config.vocab_size > len(tok):
        raise ValueError(
            f"{checkpoint} has {model.config.vocab_size} tokens but the task tokenizer only "
            f"{len(tok)}: it was trained on another task language; train from scratch instead"
        )
    if model.config.vocab_size < len(tok):
        model.resize_token_embeddings(len(tok), mean_resizing=False)
    return model


def earlier_run(checkpoint: Path) -> dict:
    """The training record of a checkpoint a run continues from (losses dropped), so a
    model card can list every stage the weights went through."""
    path = checkpoint / "train_log.json"
    if not path.exists():
        return {"checkpoint": str(checkpoint), "note": "no train_log.json"}
    log = json.loads(path.read_text())
    log.pop("losses", None)
    return log


def train(cfg: TrainConfig, progress: bool = True) -> tuple[DiLaForMaskedDiffusion, dict]:
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    tok = build_tokenizer()
    model = load_for_training(cfg.init_from, tok) if cfg.init_from else build_model(cfg, tok)
    if cfg.block_causal:
        # a bidirectional checkpoint is a good start: within a block the two attend alike
        model.config.block_causal, model.config.block_length = True, BLOCK_LENGTH
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    start = last_save = time.time()
    cpu_start = time.process_time()  # on a shared machine a run gets less CPU than its wall time
    losses: list[float] = []
    log: dict = {"losses": [], "note": cfg.note}
    if cfg.init_from:
        log["init_from_log"] = earlier_run(Path(cfg.init_from))
    bar = tqdm(range(cfg.max_steps), disable=not progress, desc="train", mininterval=5)
    step = 0
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg)
        tasks = [TASKS[n] for n in cfg.tasks_at(step)]
        b = make_batch(
            tasks,
            tok,
            cfg.batch_size,
            rng,
            gen,
            cfg.eps,
            curriculum=step < cfg.curriculum_steps,
            extra_eos_share=cfg.extra_eos_share,
            max_len=model.config.max_position_embeddings,
            block_causal=cfg.block_causal,
            decode_mask_share=cfg.decode_mask_share,
        )
        logits = model(b.noisy, attention_mask=b.attention, prompt_lengths=b.prompt_lengths).logits
        loss = masked_diffusion_loss(logits, b.targets, b.masked, b.t, b.loss_length, b.weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0:
            avg = sum(losses[-50:]) / len(losses[-50:])
            bar.set_postfix(loss=f"{avg:.4f}", lr=f"{lr_at(step, cfg):.2e}")
            log["losses"].append([step, round(avg, 5)])
        elapsed = time.time() - start
        if time.time() - last_save > cfg.save_every_minutes * 60:
            save_checkpoint(
                model,
                tok,
                cfg,
                {
                    **log,
                    "steps": step + 1,
                    "minutes": elapsed / 60,
                    "cpu_minutes": (time.process_time() - cpu_start) / 60,
                },
            )
            last_save = time.time()
        if elapsed > cfg.max_minutes * 60:
            break
    log.update(
        steps=step + 1,
        minutes=round((time.time() - start) / 60, 2),
        cpu_minutes=round((time.process_time() - cpu_start) / 60, 2),
    )
    save_checkpoint(model, tok, cfg, log)
    return model, log


def parse_args(argv=None) -> TrainConfig:
    return parse_dataclass(TrainConfig, argv, description=__doc__, prog="python -m dilaserve.model.train")


def main(argv=None) -> None:
    cfg = parse_args(argv)
    _, log = train(cfg)
    print(
        json.dumps(
            {"out": cfg.out, "steps": log["steps"], "minutes": log["minutes"], "final_loss": log["losses"][-1][1]}
        )
    )


if __name__ == "__main__":
    main()
