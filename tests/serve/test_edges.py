"""The serving edges, against a real server with an API key and a short stall budget: the key on
every /v1 route (health and metrics open), /health without process ids and its stall verdicts,
a 415 for a body that is not JSON, one SLO field at a time, a chat that needs a user message,
and a client that leaves mid-body logged as a line, not a traceback."""

import logging
import socket
import threading
import time

import httpx
import pytest

from tests.builders.waiting import wait_until
from tests.serve.server import LONG, LiveServer

pytestmark = pytest.mark.timeout(600)

KEY = "sk-test-0123456789"


@pytest.fixture(scope="module")
def keyed(ray_cluster):
    s = LiveServer(
        reconfig_interval_s=0,
        default_slo_ms=60000,
        api_key=KEY,
        admin_api=True,
        stall_degraded_s=0.5,
        stall_unavailable_s=1.5,
    ).start()
    yield s
    s.stop()


def auth(key: str = KEY) -> dict:
    return {"Authorization": f"Bearer {key}"}


def completion(server, **fields) -> dict:
    return {"model": server.runtime.model_name, "prompt": "list : c a f b", "max_tokens": 32, **fields}


def assert_error(r: httpx.Response, status: int, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["message"] and err["type"] == "invalid_request_error" and err["code"] == status
    if param is not None:
        assert err["param"] == param, err
    return err


def test_every_v1_route_asks_for_the_key_as_openai_clients_send_it(keyed):
    chat = {"model": keyed.runtime.model_name, "messages": [{"role": "user", "content": "list : b a"}]}
    routes = [
        ("GET", "/v1/models", None),
        ("POST", "/v1/completions", completion(keyed)),
        ("POST", "/v1/chat/completions", chat),
    ]
    routes.append(("GET", "/admin/workers", None))
    for method, path, body in routes:
        for headers in ({}, auth("sk-wrong"), {"Authorization": KEY}, {"Authorization": f"Basic {KEY}"}):
            r = httpx.request(method, keyed.url + path, json=body, headers=headers, timeout=120)
            err = assert_error(r, 401)
            assert r.headers["www-authenticate"] == "Bearer"
            assert KEY not in err["message"] and "Authorization: Bearer" in err["message"], err
        r = httpx.request(method, keyed.url + path, json=body, headers=auth(), timeout=120)
        assert r.status_code == 200, (path, r.text)
    # Probes and scrapers hold no key.
    assert httpx.get(keyed.url + "/health", timeout=30).status_code == 200
    metrics = httpx.get(keyed.url + "/metrics", timeout=30)
    assert metrics.status_code == 200 and 'reason="unauthorized"' in metrics.text


def test_health_names_no_process_ids_and_the_admin_api_does(keyed):
    health = httpx.get(keyed.url + "/health", timeout=30).json()
    assert health["status"] == "ok" and "worker_pids" not in health
    pids = httpx.get(keyed.url + "/admin/workers", headers=auth(), timeout=30).json()["worker_pids"]
    assert sorted(pids) == sorted(health["instances"]) and all(
        p and all(isinstance(x, int) for x in p) for p in pids.values()
    )
    assert not any(str(x) in str(health) for p in pids.values() for x in p)


def test_health_turns_degraded_then_unavailable_while_steps_stall_and_recovers(keyed):
    """Requests wait and the engine core's loop is held (as a long control job on its thread
    would hold it): no step finishes, and /health says so, then recovers."""
    box = []
    sender = threading.Thread(
        target=lambda: box.append(
            httpx.post(
                keyed.url + "/v1/completions",
                json=completion(keyed, prompt=LONG, max_tokens=128),
                headers=auth(),
                timeout=300,
            )
        )
    )
    sender.start()
    assert wait_until(lambda: httpx.get(keyed.url + "/health", timeout=30).json()["running"] == 1, 60, 0.02)
    held = keyed.runtime.core.call(time.sleep, 4.0)
    seen = []
    while not held.done():
        r = httpx.get(keyed.url + "/health", timeout=30)
        seen.append((r.status_code, r.json()["status"], r.json().get("reason", "")))
        time.sleep(0.05)
    statuses = [(code, status) for code, status, _ in seen]
    assert (200, "degraded") in statuses and (503, "unavailable") in statuses, statuses
    # Degraded comes first, and each verdict says why.
    assert statuses.index((200, "degraded")) < statuses.index((503, "unavailable"))
    assert all("no step has finished" in why for code, status, why in seen if status != "ok")
    sender.join(timeout=300)
    assert box and box[0].status_code == 200, box
    assert httpx.get(keyed.url + "/health", timeout=30).json()["status"] == "ok"


@pytest.mark.parametrize(
    "ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]
)
def test_a_body_not_declared_as_json_gets_a_415(keyed, ctype):
    import json

    raw = json.dumps(completion(keyed)).encode()
    r = httpx.post(keyed.url + "/v1/completions", content=raw, headers={**auth(), "content-type": ctype}, timeout=120)
    err = assert_error(r, 415)
    assert ctype.split(";")[0] in err["message"] and "application/json" in err["message"]
    # The same bytes declared as JSON (with a charset), or not declared at all, are served.
    for headers in ({"content-type": "application/json; charset=utf-8"}, {}):
        r = httpx.post(keyed.url + "/v1/completions", content=raw, headers={**auth(), **headers}, timeout=120)
        assert r.status_code == 200, r.text


def test_deadline_with_slo_ms_and_a_chat_without_a_user_message_get_400s(keyed):
    both = completion(keyed, slo_ms=5000, deadline=time.time() + 5)
    err = assert_error(
        httpx.post(keyed.url + "/v1/completions", json=both, headers=auth(), timeout=120), 400, "deadline"
    )
    assert "slo_ms" in err["message"]
    chat = {"model": keyed.runtime.model_name, "messages": [{"role": "system", "content": "list : b a"}]}
    err = assert_error(
        httpx.post(keyed.url + "/v1/chat/completions", json=chat, headers=auth(), timeout=120), 400, "messages"
    )
    assert "user message" in err["message"]


def test_a_client_that_leaves_mid_body_is_one_info_line(keyed, caplog):
    uvicorn_log = logging.getLogger("uvicorn")  # uvicorn's loggers do not reach the root logger
    uvicorn_log.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="dilaserve.serve.api")
    try:
        with socket.create_connection(("127.0.0.1", keyed.port), timeout=30) as sock:
            head = (
                f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            )
            sock.sendall(head.encode() + b'{"model": ')
            time.sleep(0.3)  # the server is reading the body
        assert wait_until(lambda: any("disconnected" in r.getMessage() for r in caplog.records), 30, 0.05)
    finally:
        uvicorn_log.removeHandler(caplog.handler)
    gone = [r for r in caplog.records if "disconnected" in r.getMessage()]
    assert [r.levelno for r in gone] == [logging.INFO]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text
    # The server serves on.
    assert (
        httpx.post(keyed.url + "/v1/completions", json=completion(keyed), headers=auth(), timeout=120).status_code
        == 200
    )


def test_the_client_sends_the_key_from_the_environment(keyed, monkeypatch):
    from dilaserve.serve.client import complete

    monkeypatch.delenv("DILASERVE_API_KEY", raising=False)
    with pytest.raises(RuntimeError, match="HTTP 401"):
        complete(keyed.url, "list : c a f b", model=keyed.runtime.model_name)
    monkeypatch.setenv("DILASERVE_API_KEY", KEY)
    assert complete(keyed.url, "list : c a f b", model=keyed.runtime.model_name).steps >= 1
