"""`kvconform simulate --trace`: the three trace formats, sweeps, the table, JSON, PNG and HTML
outputs, and bad input as one line naming the file and the line, exit code 2, never a
traceback (docs/simulate.md, spec/trace-replay.md)."""
import json
from pathlib import Path

import pytest

from conformance.cli import main
from reference.tokenizer import tokenize_messages

ROOT = Path(__file__).resolve().parents[2]
MOONCAKE = ROOT / "tests" / "fixtures" / "mooncake" / "conversation_trace_head300.jsonl"


def kv(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, [line for line in err.splitlines() if line]


def error_line(capsys, *argv) -> str:
    code, out, err = kv(capsys, *argv)
    errors = [line for line in err if line.startswith("kvconform: error:")]
    assert code == 2 and len(errors) == 1, (code, err)
    return errors[0]


def jsonl(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def hash_line(ids, n, g=1, t=0):
    return {"timestamp": t, "input_length": n, "output_length": g, "hash_ids": ids}


# -- the Mooncake excerpt -------------------------------------------------------------------------

def expected_unbounded(lines, B=512):
    """The count of every request at unbounded capacity, derived from the ids alone: each earlier
    request left all its full prompt blocks cached (PEER-VLLM-4; its sampled tokens make only new
    blocks, SIM-GEN-1), so request r reuses its k leading ids that were a full block before,
    capped below n (PEER-VLLM-3: B * min(k, floor((n - 1) / B)); for kvconform-1 at P = B the
    full-input rewind of CR-PLAN-2 is the same number)."""
    full, out = set(), []
    for r in lines:
        ids, n = r["hash_ids"], r["input_length"]
        k = 0
        while k < len(ids) and tuple(ids[:k + 1]) in full:
            k += 1
        out.append(B * min(k, (n - 1) // B))
        full.update(tuple(ids[:j + 1]) for j in range(n // B))
    return out


def test_the_mooncake_excerpt_at_unbounded_capacity(capsys, tmp_path):
    lines = [json.loads(x) for x in MOONCAKE.read_text().splitlines()]
    expected = expected_unbounded(lines)
    out = tmp_path / "replay.json"
    code, table, err = kv(capsys, "simulate", "--trace", MOONCAKE, "--profile", "vllm-apc:block_size=512",
                          "--profile", "kvconform-1:tokens_per_page=512,max_records=100000", "--json", out,
                          "--per-request")
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["trace"]["requests"] == 300 and doc["trace"]["prompt_tokens"] == sum(r["input_length"] for r in lines)
    assert [q["reused"] for q in doc["requests"]] == [[c, c] for c in expected]
    for run in doc["runs"]:
        assert run["reused_tokens"] == sum(expected) and run["not_admitted"] == 0
        assert run["hit_ratio_tokens"] == pytest.approx(sum(expected) / doc["trace"]["prompt_tokens"])
        assert run["hit_ratio_requests"] == pytest.approx(sum(c > 0 for c in expected) / 300)
    assert "vllm-apc:block_size=512" in table and "kvconform-1:tokens_per_page=512" in table


def test_a_sweep_writes_the_table_json_png_and_html(capsys, tmp_path):
    out, png, page = tmp_path / "s.json", tmp_path / "s.png", tmp_path / "s.html"
    code, table, err = kv(capsys, "simulate", "--trace", MOONCAKE, "--limit", 60, "--profile", "vllm-apc",
                          "--profile", "kvconform-1", "--capacity", "2e5:2e6:3,inf", "--json", out, "--plot", png,
                          "--html", page)
    assert code == 0, err
    doc = json.loads(out.read_text())
    runs = [(r["label"], r["capacity"]) for r in doc["runs"]]
    assert runs == [(p, c) for p in ("vllm-apc", "kvconform-1") for c in (200000, 632456, 2000000, None)]
    assert [r["pool"]["units"] for r in doc["runs"][:4]] == [12500, 39528, 125000, None]     # blocks of 16 (SIM-CAP-1)
    assert doc["trace"]["requests"] == 60 and "requests" not in doc
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = page.read_text()
    assert "data:image/png;base64," in html and "Content-Security-Policy" in html and "SIM-ORDER-1" in html
    assert len(table.splitlines()) == 2 + 8
    assert len([line for line in err if " at " in line]) == 8                       # one progress line per run


def test_capacities_in_pages(capsys, tmp_path):
    out = tmp_path / "s.json"
    code, _, err = kv(capsys, "simulate", "--trace", MOONCAKE, "--limit", 5, "--profile", "vllm-apc:block_size=32",
                      "--capacity", "1000", "--capacity-unit", "pages", "--json", out)
    assert code == 0, err
    run = json.loads(out.read_text())["runs"][0]
    assert run["pool"]["units"] == 1000 and run["capacity_tokens"] == 32000


# -- chat logs and request files ------------------------------------------------------------------

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three primes."}]


def test_a_chat_log(capsys, tmp_path):
    """Three lines, timestamps out of order: replayed 0, 5, 9 (SIM-ORDER-1). The first two are the
    same messages; sglang-radix with pages of 1 reports N - 1 for the repeat (PEER-SGL-1), and 1
    for the third, which shares only the template's first token (<|bos|>, then another role)."""
    n = len(tokenize_messages(MESSAGES, "$", str(tmp_path), True, True).tokens)
    other = [{"role": "user", "content": "x"}]
    trace = jsonl(tmp_path, "chat.jsonl", [{"timestamp": 5, "messages": MESSAGES, "max_tokens": 3},
                                           {"timestamp": 0, "messages": MESSAGES, "output_length": 2},
                                           {"timestamp": 9, "body": {"messages": other}}])
    out = tmp_path / "c.json"
    code, _, err = kv(capsys, "simulate", "--trace", trace, "--profile", "sglang-radix", "--json", out, "--per-request")
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["trace"]["format"] == "chat"
    assert [(q["source"], q["output_length"], q["reused"]) for q in doc["requests"]] == [
        ("line 2", 2, [0]), ("line 1", 3, [n - 1]), ("line 3", 1, [1])]


def test_a_chat_log_with_a_real_tokenizer(capsys, tmp_path):
    """--tokenizer: the model's chat template and tokenizer (spec/hf-tokenizer.md), here Phi-3's;
    the repeat reports N - 1 (PEER-SGL-1), N as the oracle's hf tokenizer counts it."""
    import reference
    from reference.hf_tokenizer import tokenize_hf
    folder = ROOT / "spec" / "tokenizers" / "phi-3-mini"
    engine = reference.engine_from_build_args({"maxInputLen": 4096, "maxKVCacheCapacity": 4097, "maxKVPoolPages": 0,
                                               "tokenizer": str(folder), "tokenizerLoader": "transformers-auto"})
    n = len(tokenize_hf(MESSAGES, "$", str(tmp_path), True, True, engine).tokens)
    assert n != len(tokenize_messages(MESSAGES, "$", str(tmp_path), True, True).tokens)
    trace = jsonl(tmp_path, "chat.jsonl", [{"messages": MESSAGES}] * 2)
    out = tmp_path / "c.json"
    code, _, err = kv(capsys, "simulate", "--trace", trace, "--tokenizer", folder, "--profile", "sglang-radix",
                      "--json", out, "--per-request")
    assert code == 0, err
    assert [(q["input_length"], q["reused"]) for q in json.loads(out.read_text())["requests"]] == [(n, [0]), (n, [n - 1])]


def test_a_request_file(capsys, tmp_path):
    """The kit's request format, one request at a time: the second of two equal requests keeps
    floor(n / 4) pages, one fewer when n is a multiple of 4 (CR-PLAN-2); each samples the file's
    max_generate_length."""
    doc = {"apply_chat_template": False, "max_generate_length": 2,
           "requests": [{"messages": [{"role": "user", "content": "abcdefghij"}]}] * 2}
    path = tmp_path / "requests.json"
    path.write_text(json.dumps(doc, indent=2))
    out = tmp_path / "r.json"
    code, _, err = kv(capsys, "simulate", "--trace", path, "--profile", "kvconform-1:tokens_per_page=4", "--json", out,
                      "--per-request")
    assert code == 0, err
    result = json.loads(out.read_text())
    assert result["trace"]["format"] == "requests"
    assert [(q["source"], q["input_length"], q["output_length"], q["reused"]) for q in result["requests"]] == [
        ("$.requests[0]", 10, 2, [0]), ("$.requests[1]", 10, 2, [8])]


def test_ignore_outputs(capsys, tmp_path):
    trace = jsonl(tmp_path, "t.jsonl", [hash_line([1], 4, 50), hash_line([1], 4, 7)])
    out = tmp_path / "o.json"
    assert kv(capsys, "simulate", "--trace", trace, "--block-size", 4, "--ignore-outputs", "--json", out,
              "--per-request")[0] == 0
    doc = json.loads(out.read_text())
    assert doc["trace"]["outputs"] == "ignored" and [q["output_length"] for q in doc["requests"]] == [1, 1]


# -- bad input --------------------------------------------------------------------------------------

BAD_LINES = [
    ("not json", "line 2: not JSON"),
    ([1, 2], "line 2: expected a JSON object, got list"),
    ({"input_length": 4, "output_length": 1, "timestamp": 1}, "line 2: missing 'hash_ids'"),
    ({"hash_ids": [1], "output_length": 1, "timestamp": 1}, "line 2: missing 'input_length'"),
    (hash_line([1], 0), "line 2: input_length must be an integer in 1..16777216, got 0"),
    (hash_line([1], 4.0), "line 2: input_length must be an integer in 1..16777216, got 4.0"),
    (hash_line([1, -2], 8), "line 2: hash_ids must be a list of integers >= 0, holds -2"),
    (hash_line([1], 9), "line 2: hash_ids: 1 ids for input_length 9, expected ceil(9 / 8) = 2"),
    (hash_line([1], 4, -1), "line 2: output_length must be an integer in 0..16777216, got -1"),
    (hash_line([1], 4, t="soon"), "line 2: timestamp must be a finite number, got 'soon'"),
    ({"input_length": 4, "output_length": 1, "hash_ids": [1]}, "line 2: timestamp missing, but line 1 has one"),
]


@pytest.mark.parametrize("line, message", BAD_LINES, ids=[m.split(": ", 1)[1][:40] for _, m in BAD_LINES])
def test_a_bad_hash_id_line(capsys, tmp_path, line, message):
    trace = jsonl(tmp_path, "t.jsonl", [hash_line([1], 8), line, hash_line([2], 8)])
    err = error_line(capsys, "simulate", "--trace", trace, "--block-size", 8)
    assert err == f"kvconform: error: {trace}: {message}" or err.startswith(f"kvconform: error: {trace}: {message}"), err


@pytest.mark.parametrize("line, message", [
    ({"messages": [{"role": "robot", "content": "x"}]}, "line 2: $.messages[0].role: unknown role 'robot'"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]},
     "line 2: $.messages[0].content[0].type: unsupported content item type 'image_url'"),
    ({"messages": []}, "line 2: messages must be a non-empty list"),
    ({"messages": MESSAGES, "max_tokens": 0}, "line 2: max_tokens must be an integer in 1..16777216, got 0"),
])
def test_a_bad_chat_line(capsys, tmp_path, line, message):
    trace = jsonl(tmp_path, "c.jsonl", [{"messages": MESSAGES}, line])
    err = error_line(capsys, "simulate", "--trace", trace)
    assert err.startswith(f"kvconform: error: {trace}: {message}"), err


def test_a_bad_request_file_names_the_json_path(capsys, tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"requests": [{"messages": [{"role": "user", "content": 5}]}]}))
    err = error_line(capsys, "simulate", "--trace", path)
    assert err.startswith(f"kvconform: error: {path}: $.requests[0].messages[0].content: "), err


@pytest.mark.parametrize("argv, message", [
    (["--profile", "nope"], "--profile nope: unknown profile 'nope'"),
    (["--profile", "vllm-apc:block=3"], "--profile vllm-apc:block=3: vllm-apc has no setting 'block'"),
    (["--profile", "llama.cpp-server", "--capacity", "1000"], "llama.cpp-server has no pool in tokens"),
    (["--profile", "vllm-apc:cache_blocks=5", "--capacity", "1000"], "sets cache_blocks already"),
    (["--capacity", "lots"], "argument --capacity: 'lots' is not a capacity"),
    (["--capacity", "10:5:3"], "a range needs 0 < LOW < HIGH"),
    (["--per-request"], "--per-request writes into the --json document"),
    (["--profile", "vllm-apc:x"], "expected KEY=VALUE"),
    (["--tokenizer", "/nowhere"], "--tokenizer reads chat logs and request files"),
])
def test_bad_options(capsys, tmp_path, argv, message):
    trace = jsonl(tmp_path, "t.jsonl", [hash_line([1], 8)])
    err = error_line(capsys, "simulate", "--trace", trace, "--block-size", 8, *argv)
    assert message in err, err


def test_an_output_never_overwrites_the_trace(capsys, tmp_path):
    trace = jsonl(tmp_path, "t.jsonl", [hash_line([1], 8)])
    before = trace.read_text()
    err = error_line(capsys, "simulate", "--trace", trace, "--block-size", 8, "--json", trace)
    assert "refusing to overwrite an input" in err and trace.read_text() == before


@pytest.mark.parametrize("text, message", [("", "the trace is empty"), ("[1]\n", "line 1: not a trace"),
                                           ("{\"x\": 1}\n", "line 1: not a trace")])
def test_not_a_trace(capsys, tmp_path, text, message):
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    assert message in error_line(capsys, "simulate", "--trace", path)


def test_without_trace_the_request_file_options_are_still_required(capsys):
    err = error_line(capsys, "simulate", "--inputFile", "x.json")
    assert "--engineDir --engineConfig is required" in err
