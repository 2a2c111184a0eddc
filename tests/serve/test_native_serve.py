"""Serving tiny LLaDA and Dream folders end to end: one TP-2 instance on two CPU slots."""

import httpx
import pytest

from dilaserve.engine import DenoisingEngine
from dilaserve.model.make_tiny import TinyShape, make_tiny
from tests.serve.server import LiveServer, instances

pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize("arch", ["llada", "dream"])
def test_a_tiny_family_checkpoint_serves_with_the_dual_cache_at_tp2(ray_cluster, tmp_path, arch):
    path = make_tiny(
        arch, tmp_path / arch, TinyShape(layers=2, hidden=32, heads=4, kv_heads=2, intermediate=64), seed=7
    )
    # TP-2 only: the start-up latency profile then measures one degree, not two. Two TP ranks
    # importing torch and transformers on two shared cores may take minutes on a loaded host,
    # so the start-up budget is wider than the default.
    server = LiveServer(
        model=str(path),
        initial_tp=2,
        tp_degrees=[2],
        reconfig_interval_s=0,
        default_slo_ms=300000,
        startup_timeout_s=600,
    ).start(timeout_s=780)
    try:
        assert server.runtime.info.supports_cache and server.runtime.info.family == arch
        assert sorted(tp for tp, _ in instances(server).values()) == [2]
        prompt = "list : c a f"
        r = httpx.post(
            server.url + "/v1/completions",
            timeout=300,
            json={"model": server.runtime.model_name, "prompt": prompt, "max_tokens": 16},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        info = body["dilaserve"]
        assert body["usage"]["completion_tokens"] >= 1 and info["steps"] == len(info["thresholds"])
        # the TP-2 instance decoded exactly what one local process decodes with the dual cache on
        engine = DenoisingEngine.from_pretrained(path)
        st = engine.new_request(prompt, server.cfg.block_length, max_tokens=16)  # the request's cap
        for thr in info["thresholds"]:
            engine.step([st], [thr])
        assert st.finished and st.recompute_steps_done < st.steps_done  # cache steps ran
        assert body["choices"][0]["text"] == engine.tokenizer.decode(st.answer_ids().tolist(), skip_special_tokens=True)
    finally:
        server.stop()
