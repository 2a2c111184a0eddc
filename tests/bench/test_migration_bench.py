import pytest

from dilaserve.bench.migration import Loopback, main, price
from dilaserve.engine import DenoisingEngine
from dilaserve.model.adapters import load_diffusion_lm


def test_shipping_is_priced_against_the_prefill_and_delivers_the_same_cache(tiny_bd_checkpoint):
    engine = DenoisingEngine(load_diffusion_lm(tiny_bd_checkpoint))
    link = Loopback()
    try:
        row = price(engine, 2, repeats=1, link=link)  # raises if the shipped cache differs
    finally:
        link.close()
    bl, plen = engine.lm.block_length, len(engine.encode("list : a b c"))
    assert row["cached_tokens"] == plen + 2 * bl and row["context_tokens"] == plen + 3 * bl
    assert row["cache_bytes"] == 2 * 2 * 32 * 4 * row["cached_tokens"]  # K and V, 2 layers, width 32, float32
    assert row["ship_total_ms"] > row["ship_ms"] > 0 and row["prefill_ms"] > 0
    assert not engine.cached_requests()  # every measured request released its cache


def test_a_bidirectional_checkpoint_is_a_usage_error(tiny_checkpoint, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--checkpoint", str(tiny_checkpoint), "--repeats", "1"])
    assert exit_.value.code == 2 and "not a block-causal checkpoint" in capsys.readouterr().err
