"""The Azure LLM inference trace reader, on hand-written files and the bundled trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from allocator.exceptions import InputError
from allocator.io import trace as trace_module
from allocator.io.trace import read_trace

ROOT = Path(__file__).resolve().parents[3]
TRACES = ROOT / "problems" / "traces" / "azure-llm-inference-2023"

GOOD = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
    "2023-11-16 18:15:46.6805900,374,44\r\n"
    "2023-11-16 18:15:50.9951690,396,109\r\n"
    "2023-11-16 18:15:51.2224670,879,55\r\n"
    "2023-11-16 18:15:51.2224670,91,16\r\n"
)


def write(tmp_path: Path, text: str, name: str = "t.csv", encoding: str = "utf-8") -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode(encoding))
    return p


def test_reads_as_is(tmp_path):
    r = read_trace(write(tmp_path, GOOD))
    # 18:15:50.9951690 - 18:15:46.6805900 = 4.314579 s, by hand
    assert np.allclose(r.arrival_s, [0.0, 4.314579, 4.541877, 4.541877], atol=1e-9)
    assert r.prompt_tokens.tolist() == [374, 396, 879, 91]
    assert r.output_tokens.tolist() == [44, 109, 55, 16]


def test_num_prompts_and_speedup(tmp_path):
    r = read_trace(write(tmp_path, GOOD), num_prompts=2, speedup=2.0)
    assert len(r) == 2
    assert np.allclose(r.arrival_s, [0.0, 4.314579 / 2], atol=1e-9)


def test_column_order_extra_columns_bom_and_blank_lines(tmp_path):
    text = (
        "GeneratedTokens,Other,TIMESTAMP,ContextTokens\n"
        "10,x,2023-01-01 00:00:00,5\n"
        "\n"
        "20,y,2023-01-01 00:00:01.5,6\n"
    )
    r = read_trace(write(tmp_path, text, encoding="utf-8-sig"))
    assert r.arrival_s.tolist() == [0.0, 1.5]
    assert r.prompt_tokens.tolist() == [5, 6]
    assert r.output_tokens.tolist() == [10, 20]


def test_chunked_reading_gives_the_same(tmp_path, monkeypatch):
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"2023-11-16 18:00:{s:02d}.25,{10 + s},{1 + s}" for s in range(11)]
    path = write(tmp_path, "\n".join(rows) + "\n")
    whole = read_trace(path)
    monkeypatch.setattr(trace_module, "TRACE_CHUNK_ROWS", 3)
    chunked = read_trace(path)
    assert np.array_equal(whole.arrival_s, chunked.arrival_s)
    assert np.array_equal(whole.prompt_tokens, chunked.prompt_tokens)
    assert whole.arrival_s.tolist() == [float(s) for s in range(11)]
    assert len(read_trace(path, num_prompts=7)) == 7


def test_non_monotone_across_a_chunk_boundary(tmp_path, monkeypatch):
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"2023-11-16 18:00:0{s},5,5" for s in (0, 1, 2, 1, 4)]
    path = write(tmp_path, "\n".join(rows) + "\n")
    monkeypatch.setattr(trace_module, "TRACE_CHUNK_ROWS", 3)
    with pytest.raises(InputError) as err:
        read_trace(path)
    assert err.value.field == "trace" and "row 4" in err.value.message


@pytest.mark.parametrize(
    "body, words",
    [
        ("2023-11-16 18:00:05,5,5\n2023-11-16 18:00:04,5,5\n", ["row 2", "monotone"]),
        ("2023-11-16 18:00:05,5,5\nyesterday,5,5\n", ["row 2", "TIMESTAMP", "yesterday"]),
        ("2023-13-45 18:00:05,5,5\n", ["row 1", "TIMESTAMP"]),
        ("2023-11-16 18:00:05,5,5\n2023-11-16 18:00:06,-3,5\n", ["row 2", "ContextTokens"]),
        ("2023-11-16 18:00:05,5,0\n", ["row 1", "GeneratedTokens", "positive"]),
        ("2023-11-16 18:00:05,5,12.5\n", ["row 1", "GeneratedTokens"]),
        ("2023-11-16 18:00:05,5\n", ["row 1", "fields"]),
        ("", ["no data rows"]),
    ],
)
def test_bad_rows(tmp_path, body, words):
    path = write(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n" + body)
    with pytest.raises(InputError) as err:
        read_trace(path)
    assert err.value.field == "trace"
    for w in words:
        assert w in err.value.message


@pytest.mark.parametrize(
    "text, words",
    [
        ("TIMESTAMP,ContextTokens\n2023-11-16 18:00:05,5\n", ["missing column", "GeneratedTokens"]),
        ("", ["empty"]),
    ],
)
def test_bad_files(tmp_path, text, words):
    with pytest.raises(InputError) as err:
        read_trace(write(tmp_path, text))
    assert err.value.field == "trace"
    for w in words:
        assert w in err.value.message


def test_bad_arguments(tmp_path):
    path = write(tmp_path, GOOD)
    for kwargs, field in (
        ({"num_prompts": 0}, "num_prompts"),
        ({"speedup": 0.0}, "speedup"),
        ({"speedup": float("inf")}, "speedup"),
    ):
        with pytest.raises(InputError) as err:
            read_trace(path, **kwargs)
        assert err.value.field == field
    with pytest.raises(InputError) as err:
        read_trace(tmp_path / "missing.csv")
    assert err.value.field == "trace"


def test_bundled_traces():
    conv = read_trace(TRACES / "AzureLLMInferenceTrace_conv.csv")
    code = read_trace(TRACES / "AzureLLMInferenceTrace_code.csv")
    assert (len(conv), len(code)) == (19_366, 8_819)  # the source README's counts
    # the first rows of the conversation trace, by hand from the file
    assert conv.prompt_tokens[:3].tolist() == [374, 396, 879]
    assert conv.output_tokens[:3].tolist() == [44, 109, 55]
    assert conv.arrival_s[1] == pytest.approx(4.314579, abs=1e-9)
    # about one hour of requests
    assert 3000 < conv.arrival_s[-1] < 3700 and 3000 < code.arrival_s[-1] < 3700
    head = read_trace(TRACES / "AzureLLMInferenceTrace_conv.csv", num_prompts=100, speedup=4.0)
    assert np.allclose(head.arrival_s, conv.arrival_s[:100] / 4.0)


def test_bundled_files_carry_license_and_attribution():
    names = {p.name for p in TRACES.iterdir()}
    assert {"LICENSE", "AzureLLMInferenceDataset2023.md", "README.md"} <= names
    readme = (TRACES / "README.md").read_text(encoding="utf-8")
    assert "b469a113cedca53ddc3bdea71a143dc4b7d8700c" in readme
    assert "CC-BY 4.0" in readme and "Splitwise" in readme and "unchanged" in readme
    assert "Attribution 4.0 International" in (TRACES / "LICENSE").read_text(encoding="utf-8-sig")


def test_epoch_second_timestamps_are_seconds_not_years(tmp_path):
    """A plain-number TIMESTAMP is Unix time: 1700000000 and 1700000002.5 arrive 2.5 s
    apart (numpy alone reads ``1700000000`` as a year and refuses or wraps it)."""
    p = tmp_path / "t.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n1700000000,10,5\n1700000002.5,7,3\n"
        "1700000010,4,2\n"
    )
    r = read_trace(p)
    assert r.arrival_s.tolist() == [0.0, 2.5, 10.0]
    assert r.prompt_tokens.tolist() == [10, 7, 4]


def test_a_file_that_is_not_a_trace_is_not_echoed(tmp_path):
    """An environment-like file (``/proc/self/environ``) is refused with a short prefix of
    its header, every ``KEY=VALUE`` value masked, never the values themselves."""
    p = tmp_path / "environ"
    p.write_bytes(b"API_KEY=s3cr3t-value\0DB_PASSWORD=hunter2\0" + b"X=y\0" * 500 + b"\n")
    with pytest.raises(InputError) as e:
        read_trace(p)
    text = str(e.value)
    assert "s3cr3t" not in text and "hunter2" not in text
    assert "API_KEY=***" in text and len(text) < 400


def test_a_bad_timestamp_is_quoted_short_and_masked(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nTOKEN=abcdef" + "z" * 500 + ",1,1\n")
    with pytest.raises(InputError) as e:
        read_trace(p)
    assert "abcdef" not in str(e.value) and len(str(e.value)) < 400
