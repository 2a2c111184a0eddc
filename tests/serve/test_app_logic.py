"""The serving app's logic (``dilaserve.serve.app_logic``) against a real server over loopback:
the floor bound by the server's candidates, one note on how an answer ended, one send per
submission (none on a restart), the form kept across a restart, the empty-answer text, the live
metrics as the cards show them. The burst's tests are in tests/notebooks/test_serve_burst.py."""

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
    assert app_logic.finished_requests(before) == 0 and app_logic.attainment_text(before) == app_logic.NO_DATA
    # The table says what the card says: a dash, not the gauge's 0, before anything finished.
    assert {r["metric"]: r["value"] for r in app_logic.metric_rows(before)}["dilaserve:slo_attainment"] == "\u2013"
    inst = task_suite(1, seed=3)[0]
    send(server)(server.url, app_logic.PromptRequest(inst.prompt, slo_ms=60_000, max_tokens=inst.gen_length))
    after = client.fetch_metrics(server.url)
    assert app_logic.finished_requests(after) == 1 and re.fullmatch(r"\d+%", app_logic.attainment_text(after))
    assert not any(k.endswith("_created") for k in after)  # the server exports none (they read as counts)
    rows = app_logic.metric_rows(after)
    assert rows and not any("_created" in r["metric"] or "_bucket" in r["metric"] for r in rows)
    values = {r["metric"]: r["value"] for r in rows}
    assert values["dilaserve:slo_attainment"] == app_logic.attainment_text(after)  # "100%" in both
    numbers = [float(v.replace(",", "")) for k, v in values.items() if k != "dilaserve:slo_attainment"]
    assert all(v == float(f"{v:.4g}") for v in numbers), rows  # four significant digits


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


def test_one_note_says_how_an_answer_ended(server):
    arith = max((i for i in task_suite(4, seed=5) if i.task == "arith"), key=lambda i: i.answer_length)
    assert arith.gen_length > 32
    examples = {arith.prompt: arith}
    short = app_logic.PromptRequest(arith.prompt, 60_000, max_tokens=32)
    cut = send(server)(server.url, short)
    # The model sees its 32-token canvas and ends early ("stop") or fills it ("length"):
    # either way one warning says so, and names the max tokens that fit the answer.
    assert cut.finish_reason in ("stop", "length")
    kind, note = app_logic.ending_note(short, cut.finish_reason, app_logic.example_for(short.prompt, examples))
    assert kind == "warn" and f"max tokens {arith.gen_length}" in note
    verdict = app_logic.grade(arith.prompt, cut.text, examples)
    assert verdict is not None and not verdict.correct
    fits = app_logic.PromptRequest(arith.prompt, 60_000, max_tokens=arith.gen_length)
    full = send(server)(server.url, fits)
    assert full.finish_reason == "stop"
    assert app_logic.ending_note(fits, full.finish_reason, arith)[0] == "neutral"
    # max tokens below the answer, within one block: "length" is one message, about max tokens.
    tiny = app_logic.PromptRequest(arith.prompt, 60_000, max_tokens=16)
    kind, note = app_logic.ending_note(tiny, "length", arith)
    assert kind == "warn" and "max tokens 16" in note and "canvas of 16" not in note
    # A typed prompt has no known length: the note says to raise max tokens.
    kind, note = app_logic.ending_note(app_logic.PromptRequest("list : a b", 1, 2), "length", None)
    assert kind == "warn" and "raise **max tokens**" in note
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
    assert client.parse_completion(body).finish_reason is None and app_logic.ending_note(short, None, arith) is None


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


def test_the_form_keeps_what_was_sent_across_a_restart():
    examples = list(app_logic.example_prompts(per_task=1).values())
    first, other = examples[0], examples[1]
    floors = app_logic.floor_steps([0.5, 0.7, 0.9])
    fresh = app_logic.form_defaults(None, first, floors)
    assert fresh["prompt"] == first.prompt and fresh["max_tokens"] == first.gen_length and fresh["min_threshold"] == 0
    outbox = app_logic.Outbox()
    sent = app_logic.PromptRequest(first.prompt + " b", 900, 64, min_threshold=0.9, priority=3, example=first.prompt)
    outbox.submit(sent)
    # The server restarts: the form is rebuilt from what was sent, the floor as it was.
    again = app_logic.form_defaults(outbox.latest, first, floors)
    assert again == {"prompt": sent.prompt, "slo_ms": 900, "max_tokens": 64, "min_threshold": 0.9, "priority": 3}
    # A server with fewer candidates: the floor snaps down to one it accepts.
    assert app_logic.form_defaults(outbox.latest, first, app_logic.floor_steps([0.5, 0.7]))["min_threshold"] == 0.7
    # Another example picked: its own prompt and canvas, the SLO, floor and priority kept.
    switched = app_logic.form_defaults(outbox.latest, other, floors)
    assert switched["prompt"] == other.prompt and switched["max_tokens"] == other.gen_length
    assert (switched["slo_ms"], switched["min_threshold"], switched["priority"]) == (900, 0.9, 3)


def test_the_port_field():
    assert app_logic.port_choice(0) is None and app_logic.port_choice(None) is None
    assert app_logic.port_choice(8123) == 8123
    with pytest.raises(ValueError, match="0 for any free port"):
        app_logic.port_choice(80)
