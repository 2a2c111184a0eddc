"""Request parsing without a server: strict types, refused sampling fields, unreadable text,
body errors that say "request body", and unknown fields named."""

import json

import pytest

from dilaserve.serve.errors import BadRequest
from dilaserve.serve.protocol import ChatCompletionRequest, CompletionRequest, parse_request

BASE = {"model": "m", "prompt": "list : c a f b"}


def refused(body, cls=CompletionRequest) -> BadRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(BadRequest) as e:
        parse_request(raw, cls)
    assert e.value.status == 400
    return e.value


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": "16"}, "max_tokens"),
        ({"max_tokens": 16.0}, "max_tokens"),
        ({"stream": "yes"}, "stream"),
        ({"stream": 1}, "stream"),
        ({"slo_ms": True}, "slo_ms"),
        ({"priority": "1"}, "priority"),
        ({"temperature": -1}, "temperature"),
        ({"temperature": 5}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 0.7}, "temperature"),
        ({"top_p": 2}, "top_p"),
        ({"top_p": 0.9}, "top_p"),
        ({"presence_penalty": 1}, "presence_penalty"),
        ({"logit_bias": {"5": 1}}, "logit_bias"),
        ({"n": 2}, "n"),
        ({"logprobs": 1}, "logprobs"),
        ({"echo": True}, "echo"),
        ({"best_of": 3}, "best_of"),
        ({"seed": "7"}, "seed"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": [""]}, "stop"),
        ({"stop": 5}, "stop"),
        ({"max_tokens": 8, "max_completion_tokens": 16}, "max_completion_tokens"),
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
        ({"prompt": "list : a\x00 b"}, "prompt"),
        ({"prompt": "list : a\x1b b"}, "prompt"),
        ({"prompt": "list : \ud800"}, "prompt"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"tools": []}, "tools"),
    ],
)
def test_each_bad_field_is_a_400_naming_it(extra, param):
    err = refused({**BASE, **extra})
    assert err.param == param and param in str(err), str(err)


def test_a_lone_surrogate_escape_is_named_not_a_server_error():
    # json.dumps writes "\ud800" as the escape a client sends; the server must read it and refuse it.
    raw = b'{"model": "m", "prompt": "list : \\ud800 b"}'
    err = refused(raw)
    assert err.param == "prompt" and "surrogate" in str(err)
    chat = b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}'
    err = refused(chat, ChatCompletionRequest)
    assert err.param == "messages.0.content" and "surrogate" in str(err)


def test_a_paired_surrogate_is_text():
    raw = b'{"model": "m", "prompt": "list : \\ud83c\\udf89"}'
    assert parse_request(raw, CompletionRequest).prompt == "list : \U0001f389"


@pytest.mark.parametrize("raw", [b"", b"   ", b"{not json", b"[1, 2]", b'"a string"', b"\xff\xfe{", b"[" * 100000])
def test_body_errors_say_request_body(raw):
    err = refused(raw)
    assert err.param is None and "request body" in str(err), str(err)


def test_accepted_fields_mean_what_they_say():
    body = parse_request(
        json.dumps({**BASE, "max_completion_tokens": 8, "temperature": 0, "top_p": 1, "seed": 3, "stop": "b"}).encode(),
        CompletionRequest,
    )
    assert body.answer_limit == 8 and body.limit_field == "max_completion_tokens" and body.stop_strings == ("b",)
    same = parse_request(json.dumps({**BASE, "max_tokens": 8, "max_completion_tokens": 8}).encode(), CompletionRequest)
    assert same.answer_limit == 8
    chat = parse_request(
        json.dumps({"model": "m", "messages": [{"role": "user", "content": "list : a"}], "logprobs": False}).encode(),
        ChatCompletionRequest,
    )
    assert chat.prompt == "list : a"
    err = refused(
        {"model": "m", "messages": [{"role": "user", "content": "a"}], "logprobs": True}, ChatCompletionRequest
    )
    assert err.param == "logprobs"


def test_slo_ms_and_deadline_together_are_refused_not_one_dropped():
    err = refused({**BASE, "slo_ms": 5000, "deadline": 2e9})
    assert err.param == "deadline" and "slo_ms" in str(err)
    assert parse_request(json.dumps({**BASE, "deadline": 2e9}).encode(), CompletionRequest).deadline == 2e9


@pytest.mark.parametrize("roles", [["system"], ["system", "assistant"], ["developer"]])
def test_a_chat_without_a_user_message_is_refused(roles):
    messages = [{"role": r, "content": "list : b a"} for r in roles]
    err = refused({"model": "m", "messages": messages}, ChatCompletionRequest)
    assert err.param == "messages" and "user message" in str(err)


def test_a_chat_answers_its_last_user_message():
    messages = [{"role": "user", "content": "list : a"}, {"role": "user", "content": "list : b"}]
    messages.append({"role": "assistant", "content": "b"})
    body = parse_request(json.dumps({"model": "m", "messages": messages}).encode(), ChatCompletionRequest)
    assert body.prompt == "list : b" and body.prompt_field == "messages.1.content"
