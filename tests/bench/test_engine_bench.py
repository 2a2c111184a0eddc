import pytest

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


# ------------------------------------------------------------------ published shapes
def shape_json(capsys, *flags):
    import json

    from dilaserve.bench.engine import main

    assert main(["--json", *flags]) == 0
    return json.loads(capsys.readouterr().out.splitlines()[-1])


def test_published_shapes_have_the_published_sizes():
    import torch

    from dilaserve.bench.engine_shape import native_spec
    from dilaserve.model.native import NativeDiffusionLM

    def params(shape):
        with torch.device("meta"):
            return sum(p.numel() for p in NativeDiffusionLM(native_spec(shape, None)[1]).parameters())

    assert params("llada-8b") == 8_015_581_184  # as the H200 run of data/gpu measured it
    assert abs(params("dream-7b") / 7.62e9 - 1) < 0.01
    family, spec = native_spec("dream-7b", 2)
    assert (family, spec.num_layers, spec.num_kv_heads, spec.logit_shift) == ("dream", 2, 4, True)


@pytest.mark.parametrize("shape,sizes", [("llada-8b", (2, 64, 4, 4, 128)), ("dream-7b", (2, 64, 4, 2, 128))])
def test_shape_bench_prints_every_field_and_its_floors_follow_from_its_rates(monkeypatch, capsys, shape, sizes):
    """The benchmark's whole path at the published vocabulary with thin layers (the real
    widths take minutes per run on CPU; the command line is the same)."""
    from dilaserve.bench import engine_shape
    from dilaserve.model.make_tiny import TinyShape

    monkeypatch.setitem(engine_shape.SHAPES, shape, (engine_shape.SHAPES[shape][0], TinyShape(*sizes)))
    out = shape_json(capsys, "--shape", shape, "--layers", "1", "--context", "80", "--recompute-batches", "1,2")
    assert {"shape", "device", "steps", "tokens_per_s_batch1", "gpu_mem_gb", "copy_gbs"} <= set(out)
    assert (out["shape"], out["device"], out["gpu_mem_gb"], out["layers"]) == (shape, "cpu", None, 1)
    # on CPU the defaults shrink: one-block answers, cache batches 1 and 2
    assert (out["context"], out["answer_tokens"], out["repeats"]) == (80, 32, 2)
    assert [(s["kind"], s["batch"]) for s in out["steps"]] == [
        ("cache", 1),
        ("cache", 2),
        ("recompute", 1),
        ("recompute", 2),
    ]
    for s in out["steps"]:
        assert set(s) == {"kind", "batch", "raw_ms", "engine_ms", "floor_ms", "floor_ratio", "tflops", "hbm_gbs"}
        assert s["raw_ms"] > 0 and s["engine_ms"] > 0 and s["floor_ms"] > 0
        assert s["floor_ratio"] == pytest.approx(s["engine_ms"] / s["floor_ms"], abs=0.01)
        # the floor is the slower of bytes over the copy rate and FLOPs over the matmul rate
        by_bytes = s["hbm_gbs"] * s["engine_ms"] / out["copy_gbs"]
        by_flops = s["tflops"] * s["engine_ms"] / out["matmul_tflops"]
        assert s["floor_ms"] == pytest.approx(max(by_bytes, by_flops), rel=0.05)
    cache1, recompute1 = out["steps"][0], out["steps"][2]
    # a cache step feeds one block, a recompute step the whole context
    assert cache1["tflops"] * cache1["engine_ms"] < recompute1["tflops"] * recompute1["engine_ms"]
    assert all(v > 0 for v in out["tokens_per_s_batch1"].values())
    assert set(out["tokens_per_s_batch1"]) == {"dual_cache", "recompute_every_step"}


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--answer-tokens", "40"], "multiple of the block"),
        (["--context", "32", "--answer-tokens", "32"], "larger than --answer-tokens"),
        (["--layers", "40"], "choose 1..32"),
        (["--cache-batches", "0,2"], "positive batch sizes"),
    ],
)
def test_bad_shape_flags_are_clear_usage_errors(capsys, flags, message):
    from dilaserve.bench.engine import main

    with pytest.raises(SystemExit) as exit_:
        main(["--shape", "llada-8b", *flags])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_shape_flags_without_a_shape_are_a_clear_usage_error(capsys):
    from dilaserve.bench.engine import main

    with pytest.raises(SystemExit) as exit_:
        main(["--quick", "--layers", "2", "--cache-batches", "1"])
    assert exit_.value.code == 2 and "--layers, --cache-batches apply only with --shape" in capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_ray_step_overhead_steps_the_same_requests_through_ray_and_in_process(default_engine):
    """The Ray-driven copies end equal to the in-process ones (the function raises otherwise),
    and each overhead is reported per batch size."""
    import ray

    from dilaserve.bench.engine import longest_instances
    from dilaserve.bench.engine_ray import ray_step_overhead
    from dilaserve.engine import DEFAULT_CHECKPOINT

    work = {str(n): ([x.prompt for x in longest_instances(n)], [64] * n) for n in (1, 3)}
    connected = ray.is_initialized()
    out = ray_step_overhead(default_engine, str(DEFAULT_CHECKPOINT), work, steps=3)
    assert set(out) == {"ray_step_overhead_ms", "ray_transport_ms", "ray_first_step_overhead_ms"}
    assert all(set(v) == {"1", "3"} for v in out.values())
    assert out["ray_transport_ms"]["3"] > 0  # a round trip costs something beyond the step
    assert ray.is_initialized() == connected  # it leaves Ray as it found it
