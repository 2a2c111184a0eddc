#!/usr/bin/env bash
# One GPU check, a few minutes on one GPU. Prints one JSON line:
#   {"device", "batch_speedup", "cache_speedup", "tokens_per_s", "embedded": {...}, "llada_tiny": {...}, "tp2": {...},
#    "shapes": {"llada-8b": {...}, "dream-7b": {...}}}
# The top-level numbers are the tiny LLaDA-architecture model's, widened (8 x 1024, real
# 126k vocabulary, bfloat16) so the GPU has work; "embedded" holds the same numbers for the
# embedded default model; "tp2" compares NCCL TP-2 logits with TP-1 and times a recompute
# step at both degrees when two GPUs exist (null otherwise). "shapes" holds the engine benchmark at
# the published LLaDA-8B and Dream-7B shapes (random bf16 weights built on the GPU: raw and engine
# ms per step against their floors, batch-1 tokens/s with and without the dual cache); on CPU it
# keeps one layer and the benchmark's CPU defaults (GPU_CHECK_SHAPE_FLAGS overrides the flags).
#
#   scripts/gpu_check.sh                       # on a CUDA host, from the repository root
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_HIDDEN=64 scripts/gpu_check.sh   # the same path on CPU (gloo), to test the script
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
DEVICE=${GPU_CHECK_DEVICE:-cuda}
HIDDEN=${GPU_CHECK_HIDDEN:-1024}
if [ "$DEVICE" = cuda ]; then SHAPE_FLAGS=${GPU_CHECK_SHAPE_FLAGS:-}; else SHAPE_FLAGS=${GPU_CHECK_SHAPE_FLAGS:---layers 1}; fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

if [ "$DEVICE" = cuda ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo '{"error": "torch sees no CUDA GPU: install a CUDA build of torch (make setup TORCH_SPEC=) or set GPU_CHECK_DEVICE=cpu"}'
  exit 2
fi

"$PY" -m dilaserve.bench engine --device "$DEVICE" --quick --json > "$WORK/embedded.json"
"$PY" -m dilaserve.model.make_tiny --arch llada --out "$WORK/llada" --layers 8 --hidden "$HIDDEN" --heads 8 \
  --kv-heads 8 --intermediate $((HIDDEN * 11 / 4)) > /dev/null
"$PY" -m dilaserve.bench engine --device "$DEVICE" --checkpoint "$WORK/llada" --quick --json > "$WORK/llada.json"

# TP-2 against TP-1 on the same folder: NCCL on two GPUs, gloo for a CPU run; skipped with one GPU
cat > "$WORK/tp2.py" <<'EOF'
import json, sys, time

import torch

from dilaserve.model.tensor_parallel import TPWorker, run_tp


def step(rank, world_size, path, device):
    model = TPWorker(path, rank, world_size, device).load()
    dev = next(model.parameters()).device
    ids = torch.randint(0, 120000, (4, 288), generator=torch.Generator().manual_seed(0)).to(dev)
    rows = torch.arange(256, 288, device=dev).expand(4, -1)
    with torch.no_grad():
        model(ids, logit_positions=rows)  # warm-up
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(5):
            logits = model(ids, return_kv=True, logit_positions=rows).logits
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    return logits.float().cpu(), (time.perf_counter() - t0) / 5 * 1000


if __name__ == "__main__":  # the TP ranks are spawned processes that import this file
    path, device = sys.argv[1], sys.argv[2]
    if device == "cuda" and torch.cuda.device_count() < 2:
        print("null")
        sys.exit(0)
    one, ms1 = run_tp(step, 1, path, device, device=device)
    two, ms2 = run_tp(step, 2, path, device, device=device)
    print(json.dumps({"backend": "nccl" if device == "cuda" else "gloo",
                      "max_abs_logit_diff": float((one - two).abs().max()),
                      "recompute_ms": {"1": round(ms1, 2), "2": round(ms2, 2)}}))
EOF
"$PY" "$WORK/tp2.py" "$WORK/llada" "$DEVICE" > "$WORK/tp2.json"

for SHAPE in llada-8b dream-7b; do
  # shellcheck disable=SC2086  # SHAPE_FLAGS is a list of flags
  "$PY" -m dilaserve.bench engine --shape "$SHAPE" --device "$DEVICE" $SHAPE_FLAGS --json > "$WORK/shape-$SHAPE.json"
done

"$PY" - "$WORK" "$DEVICE" <<'EOF'
import json, pathlib, sys

import torch

work, device = pathlib.Path(sys.argv[1]), sys.argv[2]
keys = ("batch_speedup", "cache_speedup", "tokens_per_s")
emb, llada = (json.loads((work / f).read_text().splitlines()[-1]) for f in ("embedded.json", "llada.json"))
name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
print(json.dumps({"device": name, **{k: llada[k] for k in keys},
                  "embedded": {k: emb[k] for k in keys},
                  "llada_tiny": {"cache_tokens_per_s": llada["cache_tokens_per_s"], "batch": llada["batch_speedup_batch"]},
                  "tp2": json.loads((work / "tp2.json").read_text()),
                  "shapes": {s: json.loads((work / f"shape-{s}.json").read_text().splitlines()[-1])
                             for s in ("llada-8b", "dream-7b")}}))
EOF
