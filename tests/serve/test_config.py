import pytest

from dilaserve.serve.config import ServeConfig


@pytest.mark.parametrize("value", [0, -5.0])
def test_a_non_positive_startup_budget_is_refused_with_the_flag_to_fix(value):
    with pytest.raises(ValueError, match="--startup-timeout-s must be positive"):
        ServeConfig(startup_timeout_s=value)


def test_the_startup_budget_defaults_to_five_minutes():
    assert ServeConfig().startup_timeout_s == 300.0
