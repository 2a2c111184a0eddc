"""Trace loaders: both formats read by column name; malformed files rejected with a fix."""

import numpy as np
import pytest

from dilaserve.sim.traces import AZURE_CONV, TraceFormatError, load_trace

BURSTGPT = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
BURSTGPT_V3 = "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_shipped_azure_trace_loads():
    tr = load_trace(AZURE_CONV)
    assert len(tr) == 19366 and tr.arrival_s[0] == 0.0
    assert np.all(np.diff(tr.arrival_s) >= 0)
    assert 3400 < tr.duration_s < 3600 and 5 < tr.mean_rate < 6
    assert tr.prompt_tokens.min() >= 1 and tr.output_tokens.min() >= 1


@pytest.mark.parametrize("header", [BURSTGPT, BURSTGPT_V3])
def test_burstgpt_layouts_by_column_name_drop_failed_requests(tmp_path, header):
    v3 = "Session ID" in header
    rows = [(5.0, 100, 20), (2.0, 50, 0), (1.0, 10, 30)]  # unsorted; one failed request
    body = "".join(f"{t},{'s1,0.5,' if v3 else ''}ChatGPT,{p},{o},{p + o},Conversation log\n" for t, p, o in rows)
    tr = load_trace(write(tmp_path, header + body))
    assert tr.arrival_s.tolist() == [0.0, 4.0]
    assert tr.prompt_tokens.tolist() == [10, 100] and tr.output_tokens.tolist() == [30, 20]


def test_azure_columns_in_any_order_with_numeric_timestamps(tmp_path):
    tr = load_trace(write(tmp_path, "GeneratedTokens,TIMESTAMP,ContextTokens\n5,10.5,7\n6,12.0,8\n"))
    assert tr.arrival_s.tolist() == [0.0, 1.5] and tr.prompt_tokens.tolist() == [7, 8]


@pytest.mark.parametrize(
    "text, match",
    [
        ("a,b,c\n1,2,3\n", r"expected the Azure LLM trace columns \['TIMESTAMP', 'ContextTokens', 'GeneratedTokens'\]"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests"),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,abc,4\n2023-11-16 18:15:47,5,4\n",
            "'ContextTokens' must hold token counts, found 'abc'",
        ),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,4\ntoday,5,4\n", "cannot read timestamp 'yesterday'"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,-3,4\n2.0,5,4\n", "negative"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,3,\n2.0,5,4\n", "empty value"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,3,4\n", "at least 2"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,3,4\n1.0,5,4\n", "time span"),
    ],
)
def test_malformed_traces_are_rejected_with_clear_errors(tmp_path, text, match):
    with pytest.raises(TraceFormatError, match=match):
        load_trace(write(tmp_path, text))


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(TraceFormatError, match="does not exist"):
        load_trace(tmp_path / "nope.csv")
    p = tmp_path / "bin.csv"
    p.write_bytes(b"\xff\xfe\x00\x01garbage\x00\n\x00")
    with pytest.raises(TraceFormatError):
        load_trace(p)
