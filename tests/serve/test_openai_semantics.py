"""OpenAI semantics over HTTP against the live server: every bad or odd input is a 4xx that
names its field (never a 5xx), the limits and stop strings are honoured, and refusals say
what to do: a 400 with the smallest feasible slo_ms, a 413 past --max-request-bytes."""

import json

import httpx
import pytest

from dilaserve.serve.client import fetch_metrics

pytestmark = pytest.mark.timeout(600)

ENDPOINTS = ("/v1/completions", "/v1/chat/completions")


def body_for(server, path, prompt, **fields):
    body = {"model": server.runtime.model_name, **fields}
    if path == "/v1/completions":
        body["prompt"] = prompt
    else:
        body["messages"] = [{"role": "user", "content": prompt}]
    return body


def send_raw(server, path, raw: bytes):
    return httpx.post(server.url + path, content=raw, headers={"content-type": "application/json"}, timeout=120)


def error_of(r, status=400):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["message"] and err["code"] == status
    return err


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(
    "fields,param",
    [
        ({"temperature": -1}, "temperature"),
        ({"temperature": 5}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 2}, "top_p"),
        ({"n": 2}, "n"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": "16"}, "max_tokens"),
        ({"stream": "yes"}, "stream"),
        ({"max_tokens": 8, "max_completion_tokens": 16}, "max_completion_tokens"),
        ({"unknown_field": 1}, "unknown_field"),
    ],
)
def test_refused_fields_are_named(server, path, fields, param):
    err = error_of(httpx.post(server.url + path, json=body_for(server, path, "list : c a f b", **fields), timeout=60))
    assert err["param"] == param and err["type"] == "invalid_request_error"


@pytest.mark.parametrize("field,value", [("logprobs", 1), ("echo", True)])
def test_logprobs_and_echo_are_refused_on_completions(server, field, value):
    r = httpx.post(
        server.url + "/v1/completions", json=body_for(server, "/v1/completions", "list : a", **{field: value})
    )
    assert error_of(r)["param"] == field


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize(
    "prompt,named",
    [("list : \\ud800", "surrogate"), ("list : a\\u0000 b", "U+0000"), ("list : \\u0007", "U+0007")],
)
def test_unreadable_text_is_a_400_not_a_500(server, path, prompt, named):
    key = '"prompt": "%s"' if path == "/v1/completions" else '"messages": [{"role": "user", "content": "%s"}]'
    raw = ("{" + f'"model": "{server.runtime.model_name}", ' + key % prompt + "}").encode()
    err = error_of(send_raw(server, path, raw))
    assert err["param"] in ("prompt", "messages.0.content") and named in err["message"]


@pytest.mark.parametrize("path", ENDPOINTS)
def test_a_prompt_with_some_unknown_words_is_refused_naming_them(server, path):
    r = httpx.post(server.url + path, json=body_for(server, path, "list : ç ä 🎉 b"), timeout=60)
    err = error_of(r)
    assert err["param"] == ("prompt" if path == "/v1/completions" else "messages.0.content")
    assert all(repr(w) in err["message"] for w in ("ç", "ä", "🎉")) and "'b'" not in err["message"]


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"", b'"text"'])
def test_body_errors_say_request_body(server, raw):
    err = error_of(send_raw(server, "/v1/completions", raw))
    assert err["param"] is None and "request body" in err["message"]


def test_a_body_over_the_limit_gets_413(server):
    limit = server.cfg.max_request_bytes
    prompt = "list : a " * (limit // 9 + 10)
    r = httpx.post(server.url + "/v1/completions", json=body_for(server, "/v1/completions", prompt), timeout=60)
    err = error_of(r, 413)
    assert "--max-request-bytes" in err["message"]
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


def test_max_completion_tokens_is_honoured(server):
    r = httpx.post(
        server.url + "/v1/completions",
        json=body_for(
            server, "/v1/completions", "arith : + 1 - 1 : zero one two three four five", max_completion_tokens=8
        ),
        timeout=120,
    )
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 8
    assert len(r.json()["choices"][0]["text"].split()) <= 8


@pytest.mark.parametrize("stream", [False, True])
def test_stop_strings_end_the_answer_before_them(server, stream):
    prompt = "list : c a f b e d"
    full = httpx.post(
        server.url + "/v1/completions", json=body_for(server, "/v1/completions", prompt, max_tokens=32), timeout=120
    ).json()["choices"][0]["text"]
    words = full.split()
    assert len(words) >= 3, full
    stop = words[2]
    expected = full[: full.find(stop)]
    body = body_for(server, "/v1/completions", prompt, max_tokens=32, stop=[stop], stream=stream)
    if not stream:
        r = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
        choice = r.json()["choices"][0]
        text, finish = choice["text"], choice["finish_reason"]
    else:
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as r:
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        text = "".join(e["choices"][0]["text"] for e in events)
        finish = events[-1]["choices"][0]["finish_reason"]
    assert text == expected and stop not in text and finish == "stop"


@pytest.mark.parametrize("stream", [False, True])
def test_an_slo_no_instance_can_meet_gets_a_400_with_the_smallest_feasible_slo(server, stream):
    body = body_for(server, "/v1/completions", "list : a b c d", max_tokens=128, slo_ms=1, stream=stream)
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
    err = error_of(r)
    assert err["param"] == "slo_ms" and "retry-after" not in r.headers
    need = int(err["message"].split("slo_ms >= ")[1].split(",")[0])
    assert need > 1
    # On the idle server, the SLO it names is enough: the request is taken.
    ok = httpx.post(server.url + "/v1/completions", json={**body, "slo_ms": need, "stream": False}, timeout=120)
    assert ok.status_code == 200, ok.text
    assert fetch_metrics(server.url)['dilaserve:rejected_requests_total{code="400",reason="slo_infeasible"}'] >= 1


def test_a_deadline_in_the_past_is_a_400(server):
    import time

    body = body_for(server, "/v1/completions", "list : a b", deadline=time.time() - 5)
    err = error_of(httpx.post(server.url + "/v1/completions", json=body, timeout=60))
    assert err["param"] == "deadline" and "past" in err["message"]


def test_sampling_fields_at_their_greedy_values_are_served(server):
    body = body_for(server, "/v1/chat/completions", "list : c a f b", temperature=0, top_p=1, seed=7, max_tokens=32)
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
