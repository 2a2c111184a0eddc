"""Holes that fuzzing found stay closed: non-finite numbers, prompts of unknown words, generated
requests of every shape (schemathesis, against the server's own OpenAPI schema), and overload.

The fuzz test runs ``DILASERVE_FUZZ_EXAMPLES`` examples (default 15) per endpoint, stream
flag and generation mode; set it higher for a longer run, e.g.
``DILASERVE_FUZZ_EXAMPLES=500 pytest tests/serve/test_robustness.py -k fuzz``.
"""

import asyncio
import gc
import json
import os

import httpx
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.timeout(900)

FUZZ_EXAMPLES = int(os.environ.get("DILASERVE_FUZZ_EXAMPLES", "15"))
ENDPOINTS = ("/v1/completions", "/v1/chat/completions")


def raw_post(server, path, text):
    """POST ``text`` as the JSON body, verbatim (json.dumps cannot write 1e999 or NaN)."""
    return httpx.post(
        server.url + path, content=text.encode(), headers={"content-type": "application/json"}, timeout=120
    )


def assert_openai_error(r, status=400):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["message"] and err["type"] and err["code"] == status
    return err


@pytest.mark.parametrize("field", ["slo_ms", "deadline", "min_threshold", "max_tokens", "priority", "n"])
@pytest.mark.parametrize("number", ["1e999", "-1e999", "NaN"])
def test_every_non_finite_number_gets_a_400_naming_its_field(server, field, number):
    body = f'{{"model": "{server.runtime.model_name}", "prompt": "list : c a f b", "{field}": {number}}}'
    err = assert_openai_error(raw_post(server, "/v1/completions", body))
    assert err["param"] == field


@pytest.mark.parametrize("path", ENDPOINTS)
def test_a_prompt_with_unknown_words_gets_a_400_naming_them(server, path):
    prompt = "zebra xylophone qqq"
    body = {"model": server.runtime.model_name, "max_tokens": 32}
    chat = {"messages": [{"role": "user", "content": prompt}]}
    body.update({"prompt": prompt} if path == "/v1/completions" else chat)
    err = assert_openai_error(httpx.post(server.url + path, json=body, timeout=120))
    assert err["param"] == ("prompt" if path == "/v1/completions" else "messages.0.content")
    assert all(repr(w) in err["message"] for w in prompt.split())
    # Known words do not excuse an unknown one: it would be dropped from the decode.
    body.update(
        {"prompt": "list : zebra"}
        if path == "/v1/completions"
        else {"messages": [{"role": "user", "content": "list : zebra"}]}
    )
    err = assert_openai_error(httpx.post(server.url + path, json=body, timeout=120))
    assert "'zebra'" in err["message"] and "'list'" not in err["message"]


def check_response(r, stream):
    """2xx with a well-formed answer, or 4xx with an OpenAI-style error body; never 5xx."""
    assert r.status_code < 500, f"{r.status_code}: {r.text[:500]}"
    if r.status_code >= 400:
        err = r.json()["error"]
        assert err["message"] and err["type"] and err["code"] == r.status_code, r.text
    elif stream:
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events and events[-1] == "[DONE]", r.text[-500:]
        assert all("choices" in json.loads(e) or "error" in json.loads(e) for e in events[:-1])
    else:
        assert r.json()["choices"], r.text


@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", ENDPOINTS)
def test_fuzzed_requests_get_2xx_or_4xx_never_5xx(server, path, stream, mode):
    import schemathesis
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    cases = schema[path]["POST"].as_strategy(generation_mode=GenerationMode(mode))
    model = server.runtime.model_name

    # Half the cases name the served model, so the fuzzer gets past the model check to the rest.
    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=cases, real_model=st.booleans())
    def run(case, real_model):
        if isinstance(case.body, dict):
            case.body["stream"] = stream
            if real_model:
                case.body["model"] = model
        check_response(case.call(base_url=server.url, timeout=120), stream)

    run()
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200
    ok = httpx.post(
        server.url + "/v1/completions", json={"model": model, "prompt": "list : c a f b", "max_tokens": 32}, timeout=120
    )
    assert ok.status_code == 200 and ok.json()["choices"][0]["text"]


def test_overload_past_max_queue_gets_429_and_memory_stays_bounded(server):
    """Waves of requests far past --max-queue: the excess gets a 429 with Retry-After at once,
    the rest are served, nothing is left behind, and the server's memory does not grow with
    the waves (refused requests hold nothing)."""
    rt = server.runtime
    old, rt.cfg.max_queue = rt.cfg.max_queue, 4
    proc = psutil.Process()  # the server runs in this process (its instances in Ray workers)

    async def wave(n=48):
        async with httpx.AsyncClient(base_url=server.url, timeout=300, limits=httpx.Limits(max_connections=n)) as c:
            return await asyncio.gather(
                *(
                    c.post(
                        "/v1/completions",
                        json={
                            "model": rt.model_name,
                            "prompt": "list : a b c d",
                            "max_tokens": 32,
                            "stream": i % 2 == 1,
                        },
                    )
                    for i in range(n)
                )
            )

    try:
        rss = []
        for _ in range(4):
            rs = asyncio.run(wave())
            codes = [r.status_code for r in rs]
            assert set(codes) <= {200, 429} and codes.count(429) >= 48 - 2 * 4 and 200 in codes, codes
            for r in rs:
                if r.status_code == 429:
                    assert int(r.headers["retry-after"]) >= 1 and r.json()["error"]["type"] == "rate_limit_error"
            assert (server.on_core(lambda: rt.scheduler.in_flight), server.on_loop(lambda: len(rt.handles))) == (0, 0)
            gc.collect()
            rss.append(proc.memory_info().rss)
    finally:
        rt.cfg.max_queue = old
    # The first wave warms up (imports, buffers); later waves must not keep adding memory.
    assert rss[-1] - rss[1] < 64 * 2**20, [r // 2**20 for r in rss]
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200
