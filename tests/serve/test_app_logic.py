"""The serving app's logic (``dilaserve.serve.app_logic``) against a real server over loopback:
the floor bound by the server's candidates, finish_reason, one send per submission (none on a
restart), the empty-answer text and the rounded live metrics."""

import re

import pytest

from dilaserve.engine import DEFAULT_CHECKPOINT
from dilaserve.serve import app_logic, client
from dilaserve.serve.config import ServeConfig
from dilaserve.tasks import task_suite

pytestmark = pytest.mark.timeout(600)


def send(server):
    def _send(url, r):
        return client.complete(
            url,
            r.prompt,
            max_tokens=r.max_tokens,
            slo_ms=r.slo_ms,
            priority=r.priority,
            min_threshold=r.min_threshold,
            model=server.runtime.model_name,
        )

    return _send


def test_attainment_waits_for_a_finished_request_and_metrics_are_rounded(server):
    # First in this module: the module's server has answered nothing yet.
    before = client.fetch_metrics(server.url)
    assert app_logic.finished_requests(before) == 0 and app_logic.attainment_text(before) == "-"
    inst = task_suite(1, seed=3)[0]
    send(server)(server.url, app_logic.PromptRequest(inst.prompt, slo_ms=60_000, max_tokens=inst.gen_length))
    after = client.fetch_metrics(server.url)
    assert app_logic.finished_requests(after) == 1 and re.fullmatch(r"\d+%", app_logic.attainment_text(after))
    assert not any(k.endswith("_created") for k in after)  # the server exports none (they read as counts)
    rows = app_logic.metric_rows(after)
    assert rows and not any("_created" in r["metric"] or "_bucket" in r["metric"] for r in rows)
    assert all(r["value"] == float(f"{r['value']:.4g}") for r in rows), rows  # four significant digits


def test_the_quality_floor_is_bounded_by_the_servers_candidates(server):
    candidates = app_logic.candidates_from_health(client.health(server.url))
    assert candidates == sorted(server.cfg.thresholds)
    floors = app_logic.floor_steps(candidates)
    assert floors[0] == 0.0 and floors[-1] == max(server.cfg.thresholds)
    inst = task_suite(1, seed=4)[0]
    # The top of the slider is accepted; just above it is the HTTP 400 the slider now avoids.
    reply = send(server)(server.url, app_logic.PromptRequest(inst.prompt, 60_000, inst.gen_length, floors[-1]))
    assert reply.thresholds and min(reply.thresholds) >= floors[-1]
    with pytest.raises(RuntimeError, match="above every candidate threshold"):
        send(server)(server.url, app_logic.PromptRequest(inst.prompt, 60_000, inst.gen_length, floors[-1] + 0.05))
    # A server that does not report its candidates: the server's own default set.
    assert app_logic.candidates_from_health({"status": "ok"}) == sorted(ServeConfig().thresholds)


def test_finish_reason_and_a_short_canvas_are_shown(server):
    arith = max((i for i in task_suite(4, seed=5) if i.task == "arith"), key=lambda i: i.answer_length)
    assert arith.gen_length > 32
    examples = {arith.prompt: arith}
    short = app_logic.PromptRequest(arith.prompt, 60_000, max_tokens=32)
    cut = send(server)(server.url, short)
    # The model sees its 32-token canvas and ends early ("stop") or fills it ("length"):
    # either way the reason is shown, and the known answer length says the canvas was short.
    assert cut.finish_reason in ("stop", "length")
    assert app_logic.finish_note(cut.finish_reason, 32)
    note = app_logic.canvas_note(short, app_logic.example_for(short.prompt, examples))
    assert note and f"max tokens {arith.gen_length}" in note
    verdict = app_logic.grade(arith.prompt, cut.text, examples)
    assert verdict is not None and not verdict.correct
    fits = app_logic.PromptRequest(arith.prompt, 60_000, max_tokens=arith.gen_length)
    full = send(server)(server.url, fits)
    assert full.finish_reason in ("stop", "length") and app_logic.canvas_note(fits, arith) is None
    assert "Cut off" in app_logic.finish_note("length", 32) and "ended" in app_logic.finish_note("stop", 32)
    # A body without finish_reason (an older server) reads as None and shows no note.
    body = {
        "choices": [{"text": "a b"}],
        "dilaserve": {
            "steps": 1,
            "thresholds": [0.9],
            "latency_ms": 1.0,
            "slo_ms": 10.0,
            "slo_met": True,
            "instances": [],
        },
    }
    assert client.parse_completion(body).finish_reason is None and app_logic.finish_note(None, 32) is None


def test_each_submission_is_sent_once_and_a_restart_sends_nothing(server):
    calls = []

    def counting(url, r):
        calls.append(r)
        return send(server)(url, r)

    outbox = app_logic.Outbox()
    inst = task_suite(1, seed=6)[0]
    outbox.submit(app_logic.PromptRequest(inst.prompt, 60_000, inst.gen_length))
    first = app_logic.send_pending(outbox, server.url, counting)
    assert first.reply is not None and len(calls) == 1
    # The server stops: the page keeps the last answer, nothing is sent.
    assert app_logic.send_pending(outbox, None, counting) is first and len(calls) == 1
    # It starts again (a new URL, the cells re-run): still the last answer, nothing re-sent.
    assert app_logic.send_pending(outbox, server.url + "/", counting) is first and len(calls) == 1
    # A prompt sent while stopped says so and is not sent later on its own.
    outbox.submit(app_logic.PromptRequest("list : a b", 60_000, 32))
    stopped = app_logic.send_pending(outbox, None, counting)
    assert stopped.error == app_logic.NOT_STARTED and outbox.last is first
    assert app_logic.send_pending(outbox, server.url, counting) is first and len(calls) == 1
    # A refused request is shown as an error, not raised.
    outbox.submit(app_logic.PromptRequest(inst.prompt, 60_000, inst.gen_length, min_threshold=1.0))
    refused = app_logic.send_pending(outbox, server.url, counting)
    assert refused.reply is None and "HTTP 400" in refused.error and len(calls) == 2


def test_an_empty_answer_and_unknown_words_are_said_in_words(server):
    vocabulary = app_logic.checkpoint_vocabulary(DEFAULT_CHECKPOINT)
    prompt = "hello world, how are you?"
    assert app_logic.unknown_words(prompt, vocabulary) == prompt.split()
    assert app_logic.unknown_words("list : c a f b", vocabulary) == []
    # The server refuses a prompt of only unknown words with a 400 that names them; the app
    # shows that message instead of raising or showing an empty answer.
    outbox = app_logic.Outbox()
    outbox.submit(app_logic.PromptRequest(prompt, 60_000, 32))
    shown = app_logic.send_pending(outbox, server.url, send(server))
    assert shown.reply is None and "outside the model's vocabulary" in shown.error and "'hello'" in shown.error
    assert outbox.last is shown
    assert app_logic.answer_text("") == app_logic.EMPTY_ANSWER and "``" not in app_logic.EMPTY_ANSWER
    assert app_logic.answer_text("c a f") == "`c a f`"
    assert app_logic.grade(prompt, "", app_logic.example_prompts()) is None  # no known answer


def test_verdicts_name_the_expected_answer_and_the_first_wrong_item():
    examples = app_logic.example_prompts(per_task=1)
    inst = next(i for i in examples.values() if i.task == "list")
    letters = [item[0] for item in inst.items]
    right = app_logic.grade(inst.prompt, " ".join(reversed(letters)), examples)
    assert right.correct and right.markdown() == "**correct**"
    wrong = app_logic.grade("  " + inst.prompt, " ".join([letters[0], letters[0]] + letters[1:]), examples)
    text = wrong.markdown()
    assert not wrong.correct and f"first wrong item `{letters[0]}`" in text and inst.prompt.split(" : ")[1] in text
    short = app_logic.grade(inst.prompt, letters[0], examples)
    assert short.first_wrong is None and short.missing == " ".join(letters[1:])


def test_the_step_axis_has_whole_steps():
    assert app_logic.step_axis(1) == ((0.5, 1.5), [1])
    lim, ticks = app_logic.step_axis(40)
    assert lim == (0.5, 40.5) and all(isinstance(t, int) for t in ticks) and len(ticks) <= 12
