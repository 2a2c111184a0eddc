"""Serving a block-diffusion checkpoint: two instances, and a request that migrates mid-answer
with its cache."""

import threading

import httpx
import pytest

from dilaserve.engine import DenoisingEngine
from tests.builders.waiting import wait_until
from tests.conftest import TINY_BD_BLOCK
from tests.serve.server import LiveServer, instances

pytestmark = pytest.mark.timeout(600)


def test_a_block_causal_request_migrates_mid_answer_with_its_cache_and_decodes_as_alone(
    ray_cluster, tiny_bd_checkpoint
):
    # migration at any step: a block-causal request has no recompute step after its prefill
    server = LiveServer(
        model=str(tiny_bd_checkpoint),
        block_length=TINY_BD_BLOCK,
        policy="dilaserve-paper-migrate-any-step",
        reconfig_interval_s=0,
        default_slo_ms=300000,
    ).start()
    try:
        rt = server.runtime
        assert rt.info.block_causal and wait_until(lambda: len(instances(server)) == 2, 180)
        prompt, out = "list : c a f", {}
        body = {"model": rt.model_name, "prompt": prompt, "max_tokens": 96}
        thread = threading.Thread(
            target=lambda: out.update(r=httpx.post(server.url + "/v1/completions", json=body, timeout=300))
        )
        thread.start()

        def stepped() -> bool:
            return server.on_loop(
                lambda: any(h.last_state and h.last_state.steps_done >= 2 for h in rt.handles.values())
            )

        assert wait_until(stepped, 120)
        (handle,) = server.on_loop(lambda: list(rt.handles.values()))
        # drain the request's instance: its next step moves it to the other one
        last = handle.instances[-1]
        server.on_core(lambda: rt.scheduler.pool.set_draining(rt.scheduler.pool.ids.index(last)))
        thread.join(timeout=300)
        r = out["r"]
        assert r.status_code == 200, r.text
        info = r.json()["dilaserve"]
        assert len(set(info["instances"])) == 2, info["instances"]
        # the cache was shipped: the prefill on the first instance was the only recompute step
        assert handle.last_state.finished and handle.last_state.recompute_steps_done == 1
        # and the destination continued as one local decode does
        engine = DenoisingEngine.from_pretrained(tiny_bd_checkpoint)
        st = engine.new_request(prompt, 96, TINY_BD_BLOCK, max_tokens=96)
        for thr in info["thresholds"]:
            engine.step([st], [thr])
        assert st.finished and st.block_causal
        assert r.json()["choices"][0]["text"] == engine.tokenizer.decode(
            st.answer_ids().tolist(), skip_special_tokens=True
        )
    finally:
        server.stop()


def test_a_block_length_other_than_the_models_is_refused_at_start_up(tiny_bd_checkpoint):
    from dilaserve.serve.config import ServeConfig
    from dilaserve.serve.runtime import ServingRuntime
    from dilaserve.utils.cli import build_dataclass

    cfg = build_dataclass(ServeConfig, {"model": str(tiny_bd_checkpoint), "block_length": 32})
    with pytest.raises(ValueError, match=f"--block-length {TINY_BD_BLOCK}"):
        ServingRuntime(cfg)
