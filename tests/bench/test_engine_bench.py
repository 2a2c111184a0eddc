from dilaserve.bench.engine import decode_continuously, step_costs


def test_step_costs_measure_each_kind_and_leave_no_cache(tiny_engine):
    prompts, lengths = ["list : c a f", "pairs : k q", "list : z"], [64, 32, 32]
    before = tiny_engine.cached_requests()  # the engine is shared by other tests
    costs = step_costs(tiny_engine, prompts, lengths, batch_sizes=(1, 3), cache_steps=2)
    for kind in ("recompute", "cache"):
        assert set(costs[kind]) == {"1", "3"} and all(v > 0 for v in costs[kind].values())
    assert tiny_engine.cached_requests() == before  # every measured request released its cache


def test_continuous_batching_decodes_every_request_as_generate_does(tiny_engine):
    prompts = ["list : c a f", "pairs : k q", "list : z", "list : b d", "pairs : m n"]
    lengths = [64, 32, 32, 32, 64]
    before = tiny_engine.cached_requests()
    states = decode_continuously(tiny_engine, prompts, lengths, in_flight=2)
    alone = tiny_engine.generate(prompts, threshold=0.9, gen_length=lengths)
    assert all(s.finished for s in states)
    assert [s.answer_ids().tolist() for s in states] == [g.token_ids for g in alone]
    assert tiny_engine.cached_requests() == before


def test_a_gpu_device_without_a_gpu_is_a_clear_usage_error(capsys):
    import pytest
    import torch

    from dilaserve.bench.engine import main

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    with pytest.raises(SystemExit) as exit_:
        main(["--device", "cuda", "--quick"])
    assert exit_.value.code == 2 and "use --device cpu" in capsys.readouterr().err


def test_accuracy_by_canvas_scales_each_tasks_canvas_and_caps_it_at_the_context(tiny_engine):
    from dilaserve.suite_decoding import accuracy_by_canvas, scaled_canvas
    from dilaserve.tasks import TASKS

    rng = __import__("random").Random(0)
    short, long = TASKS["list"].sample(rng, 3), TASKS["arith"].sample(rng, 8)  # 1 and 4 blocks
    assert [scaled_canvas(tiny_engine, short, k) for k in (1, 2, 3)] == [32, 64, 96]
    room = (tiny_engine.lm.max_context - len(tiny_engine.encode(long.prompt))) // 32 * 32
    assert scaled_canvas(tiny_engine, long, 1) == 128 and scaled_canvas(tiny_engine, long, 3) == room < 384
    out = accuracy_by_canvas(tiny_engine, [short], factors=(1, 2))  # a random model: it decodes every position
    assert set(out) == {"1", "2"} and all(
        v["accuracy"] in (0.0, 1.0) and set(v["by_task"]) == {"list"} for v in out.values()
    )


def test_a_gen_length_off_the_block_grid_is_a_clear_usage_error(capsys):
    import pytest

    from dilaserve.bench.engine import main

    with pytest.raises(SystemExit) as exit_:
        main(["--gen-length", "100", "--quick"])
    assert exit_.value.code == 2 and "multiple of the block length 32" in capsys.readouterr().err


def test_step_ms_by_answer_blocks_times_whole_decodes_of_one_and_four_block_canvases(tiny_engine):
    from dilaserve.bench.engine import arith_of_blocks, step_ms_by_answer_blocks

    assert {x.gen_length for x in arith_of_blocks(1, 6)} == {32} and {x.gen_length for x in arith_of_blocks(4, 6)} == {
        128
    }
    before = tiny_engine.cached_requests()
    ms, blocks = step_ms_by_answer_blocks(tiny_engine, n=1, repeats=1)
    assert set(ms) == set(blocks) == {"1", "4"} and all(v > 0 for v in ms.values())
    assert blocks["1"] == 1 and 1 <= blocks["4"] <= 4
    assert tiny_engine.cached_requests() == before  # finished requests released their caches
