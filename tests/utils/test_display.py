"""Numbers as a person reads them."""

import math

import polars as pl

from dilaserve.utils.display import rounded, rounded_frame, rounded_rows


def test_floats_keep_four_significant_digits_and_noise_reads_zero():
    assert rounded(1.211499373517445) == 1.211 and rounded(0.000123456) == 0.0001235 and rounded(3542.7) == 3543
    assert rounded(1.53e-12) == 0 and rounded(-7.39e-13) == 0  # an ILP's round-off, not a quantity
    assert rounded(16.0) == 16 and isinstance(rounded(16.0), int) and rounded(math.nan) is None
    assert rounded(True) is True and rounded("lightgbm") == "lightgbm" and rounded(math.inf) == math.inf


def test_tables_drop_empty_columns_and_round_the_rest():
    rows = rounded_rows(
        [
            {"policy": "a", "x": math.nan, "mae": 1.211499373517445, "steps on TP-2": 1.5e-12},
            {"policy": "b", "x": None, "mae": 4.48512, "steps on TP-2": 3.0},
        ]
    )
    assert rows == [
        {"policy": "a", "mae": 1.211, "steps on TP-2": 0},
        {"policy": "b", "mae": 4.485, "steps on TP-2": 3},
    ]
    frame = rounded_frame(
        pl.DataFrame({"x": [math.nan, math.nan], "n": [None, None], "q": [0.91234567, 2e-13], "policy": ["a", "b"]})
    )
    assert frame.columns == ["q", "policy"] and frame["q"].to_list() == [0.9123, 0.0]
