"""The burst's lean sender against a real HTTP server on loopback: every request sent at
once on its own connection, answers in order (by length, in chunks or to the close), and a
port that does not answer is a lost request, not an exception."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dilaserve.bench.burst import _result
from dilaserve.bench.lean_client import Reply, encode_post, send_at_once
from dilaserve.utils.net import free_port


class _Echo(BaseHTTPRequestHandler):
    """Answers a POST with its JSON body's ``n`` doubled; ``n`` odd: in chunks."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (the handler's name is the protocol's)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        out = json.dumps({"n": 2 * body["n"], "auth": self.headers.get("Authorization")}).encode()
        self.send_response(200 if body["n"] >= 0 else 429)
        self.send_header("Content-Type", "application/json")
        if body["n"] % 2:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (out[:5], out[5:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def echo_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_every_request_is_answered_in_order_by_length_or_in_chunks(echo_url):
    raw = [encode_post(echo_url, "/v1/x", {"n": n}, {"Authorization": "Bearer k"}) for n in range(40)]
    replies = asyncio.run(send_at_once(echo_url, raw))
    assert [r.status for r in replies] == [200] * 40
    assert [json.loads(r.text)["n"] for r in replies] == [2 * n for n in range(40)]
    assert all(json.loads(r.text)["auth"] == "Bearer k" and r.latency_s > 0 for r in replies)
    (refused,) = asyncio.run(send_at_once(echo_url, [encode_post(echo_url, "/v1/x", {"n": -2})]))
    assert refused.status == 429


def test_a_port_that_does_not_answer_is_a_lost_request():
    url = f"http://127.0.0.1:{free_port()}"
    (reply,) = asyncio.run(send_at_once(url, [encode_post(url, "/v1/x", {"n": 1})]))
    assert reply.status == 0 and "ConnectionRefused" in reply.text
    assert _result(reply).kind == "lost"


def test_a_burst_reply_is_read_as_the_other_clients_read_it():
    refusal = json.dumps({"error": {"message": "request refused: cannot meet its SLO", "type": "overloaded"}})
    assert _result(Reply(429, refusal, 0.1)).kind == "error"
    answer = {
        "id": "c1",
        "choices": [{"text": "a b", "finish_reason": "stop"}],
        "usage": {"completion_tokens": 2},
        "dilaserve": {"slo_met": True},
    }
    done = _result(Reply(200, json.dumps(answer), 0.5))
    assert done.kind == "completed" and done.server_slo_met and done.latency_s == 0.5
    assert _result(Reply(200, "not json", 0.5)).kind == "lost"
