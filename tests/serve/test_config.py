import pytest

from dilaserve.serve.config import ServeConfig
from dilaserve.utils.cli import parse_dataclass


@pytest.mark.parametrize("value", [0, -5.0])
def test_a_non_positive_startup_budget_is_refused_with_the_flag_to_fix(value):
    with pytest.raises(ValueError, match="--startup-timeout-s must be positive"):
        ServeConfig(startup_timeout_s=value)


def test_the_startup_budget_defaults_to_five_minutes():
    assert ServeConfig().startup_timeout_s == 300.0


@pytest.mark.parametrize("argv, served", [([], False), (["--admin-api"], True)])
def test_the_admin_reconfigure_endpoint_is_served_only_with_its_flag(argv, served):
    from dilaserve.serve.api import build_app
    from dilaserve.serve.runtime import ServingRuntime

    cfg = parse_dataclass(ServeConfig, argv)
    assert cfg.admin_api is served
    app = build_app(ServingRuntime(cfg), manage_lifecycle=False)
    paths = {route.path for route in app.routes}
    assert ("/admin/reconfigure" in paths) is served and ("/admin/workers" in paths) is served


@pytest.mark.parametrize("value", [0, 0.01, 500])
def test_a_switch_interval_outside_the_useful_range_is_refused_with_the_flag(value):
    with pytest.raises(ValueError, match="--switch-interval-ms"):
        ServeConfig(switch_interval_ms=value)


def test_the_api_key_comes_from_its_flag_or_the_environment(monkeypatch):
    monkeypatch.delenv("DILASERVE_API_KEY", raising=False)
    assert ServeConfig().api_key is None
    monkeypatch.setenv("DILASERVE_API_KEY", "sk-env")
    assert ServeConfig().api_key == "sk-env"
    assert parse_dataclass(ServeConfig, ["--api-key", "sk-flag"]).api_key == "sk-flag"  # the flag wins
    monkeypatch.setenv("DILASERVE_API_KEY", "")
    assert ServeConfig().api_key is None  # an empty variable is no key
    with pytest.raises(ValueError, match="--api-key"):
        ServeConfig(api_key="  ")


@pytest.mark.parametrize("degraded, unavailable", [(0, 30), (-1, 30), (10, 10), (30, 5)])
def test_stall_budgets_must_be_positive_and_ordered(degraded, unavailable):
    with pytest.raises(ValueError, match="--stall-degraded-s .* --stall-unavailable-s"):
        ServeConfig(stall_degraded_s=degraded, stall_unavailable_s=unavailable)


def test_the_engine_pool_and_graph_flags_reach_each_ranks_engine():
    """The K/V pool budget and CUDA graphs are flags of the server, carried whole to the
    Ray backend that builds each rank's engine."""
    from dilaserve.cluster.ray_backend import RayBackendConfig

    cfg = parse_dataclass(ServeConfig, ["--kv-cache-bytes", "1048576", "--no-cuda-graphs", "--slot-tokens", "512"])
    assert (cfg.engine.kv_cache_bytes, cfg.engine.cuda_graphs, cfg.engine.slot_tokens) == (1 << 20, False, 512)
    assert RayBackendConfig(cfg.model, engine=cfg.engine).engine.kv_cache_bytes == 1 << 20


def test_a_pool_fraction_outside_zero_to_one_is_refused_with_the_flag():
    with pytest.raises(SystemExit):
        parse_dataclass(ServeConfig, ["--gpu-memory-utilization", "1.5"])


def test_a_server_saves_up_control_budget_for_a_burst_unless_told_otherwise():
    assert parse_dataclass(ServeConfig, []).control_burst_s == 5.0
    assert parse_dataclass(ServeConfig, ["--control-burst-s", "0"]).control_burst_s == 0.0


def test_a_servers_replays_yield_the_cpu_to_its_steps_unless_told_otherwise():
    assert parse_dataclass(ServeConfig, []).control_niceness == 10
    assert parse_dataclass(ServeConfig, ["--control-niceness", "0"]).control_niceness == 0


def test_a_server_forecasts_a_rise_over_15_s_unless_told_otherwise():
    """A server's replays take time: its rises replay a shorter forecast than the simulator's."""
    assert parse_dataclass(ServeConfig, []).tuner.rise_forecast_s == 15.0
    assert parse_dataclass(ServeConfig, ["--tuner-rise-forecast-s", "30"]).tuner.rise_forecast_s == 30.0
    # a window shorter than the forecast caps it, rather than refusing a flag nobody gave
    assert parse_dataclass(ServeConfig, ["--tuner-window-s", "10"]).tuner.window_s == 10.0
