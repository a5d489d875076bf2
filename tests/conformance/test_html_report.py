"""report.html (conformance/report/html.py) and the page maps it draws (conformance/report/pagemap.py).

Every report folder gets the page: a default run, a fixed-engine run, a peer-server run, a merge
of shards; one with 0 failures still renders. The page of a run with a known FAIL (the catalogue's
media-trim-missing variant on sections/media/trim-split) is loaded in Debian's chromium: the strip
of the failing request marks the first differing page, its numbers are report.json's, no console
error; a screenshot goes to test-artifacts/. The numbers come from report.json, which holds the
oracle's prediction; the media layout is the case's own hand derivation (its description:
"ab + A (4 placeholders at 2-5) + cd ... would split A at positions 3|4", P = 4).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import conformance.commands.run as run_command
from conformance.cli import main as kvconform
from conformance.report.html import OPEN_CASES, render
from conformance.report.pagemap import MAX_REQUESTS, first_difference
from conformance.report.document import check_report
from conformance.judge.verdicts import Failure

from tests.helpers.html_checks import ARTIFACTS, chromium, embedded_page_maps, html_problems
from tests.helpers.peer_servers import build_engine, run_peers, serving

ROOT = Path(__file__).resolve().parents[2]
VARIANT = "media-trim-missing"
FAILING = "sections/media/trim-split"
PASSING = "sections/plan/boundary-p4-k1-exact"


def _load(folder: Path) -> tuple[dict, str]:
    doc = json.loads((folder / "report.json").read_text())
    assert not check_report(doc), check_report(doc)
    return doc, (folder / "report.html").read_text()


def _case(doc: dict, case_id: str) -> tuple[int, dict]:
    return next((k, c) for k, c in enumerate(doc["cases"]) if c["id"] == case_id)


def _assert_page(doc: dict, page: str) -> None:
    """Valid, self-contained, the headline shown, every case listed, the page maps report.json's."""
    assert html_problems(page) == []
    assert f'<span class="verdict-word">{doc["summary"]["headline"]}</span>' in page
    for k, c in enumerate(doc["cases"]):
        assert f'id="case-{k}"' in page and c["id"] in page
    maps = {str(k): c["details"]["page_map"] for k, c in enumerate(doc["cases"])
            if "page_map" in (c.get("details") or {})}
    assert embedded_page_maps(page) == maps


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    """A run of the faulty variant: trim-split FAILs (CR-MEDIA-3), a text-only case PASSes."""
    from conformance.adapters.faulty import FaultyAdapter
    folder = tmp_path_factory.mktemp("html") / "faulty"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_command, "make_adapter", lambda *a, **k: FaultyAdapter(VARIANT, device="cpu"))
        code = kvconform(["run", "--no-generated", "--no-progress", "-k", FAILING, "-k", PASSING,
                          "--report", str(folder)])
    assert code == 1
    return folder


def test_the_page_map_holds_what_the_oracle_decided(failing):
    doc, _ = _load(failing)
    _, case = _case(doc, FAILING)
    assert case["verdict"] == "FAIL"
    pm = case["details"]["page_map"]
    assert pm["unit"] == "page" and pm["size"] == 4 and pm["policy"]["lookup"] == "use_cache"
    by_what = {f["what"]: f for f in case["failures"]}
    failed = by_what["responses[1].context_cache.reused_tokens"]
    request = pm["requests"][1]
    assert request["expected"]["reused_tokens"] == failed["expected"]
    assert request["observed"]["reused_tokens"] == failed["observed"]
    assert request["expected"]["plan"] == by_what["responses[1].context_cache.plan"]["expected"]
    assert request["media"] == [{"item": 1, "modality": "image", "start": 2, "end": 6,
                                 "digest": request["media"][0]["digest"], "splits": [4]}]
    low = min(failed["expected"], failed["observed"])
    assert request["first_difference"] == {"what": "reused_tokens", "position": low, "page": low // 4,
                                           "expected": failed["expected"], "observed": failed["observed"]}
    assert request["rules"] == ["CR-MEDIA-3"] and pm["requests"][0]["first_difference"] is None
    # the trim and the reasons are the oracle's trace steps (reference/trace.py), not worked out again
    assert request["trim"]["given_back"] == [4] and request["trim"]["to"] == failed["expected"]
    assert "straddles the boundary at 4" in request["trim"]["why"]
    steps = {s["value"]: s for s in request["steps"]}
    assert steps["reused_tokens"]["rule"] == "CR-MEDIA-3" and steps["reused_tokens"]["why"] == failed["why"]
    assert pm["requests"][0]["trim"] is None and steps["input_tokens"]["rule"] is None
    prefill = pm["prefill"]
    assert prefill["expected"]["computed_tokens"] == by_what["profile.prefill.computed_tokens"]["expected"]
    assert prefill["observed"]["computed_tokens"] == by_what["profile.prefill.computed_tokens"]["observed"]
    _, passed = _case(doc, PASSING)
    assert passed["verdict"] == "PASS" and all(r["first_difference"] is None
                                               for r in passed["details"]["page_map"]["requests"])


def test_a_failure_carries_the_oracle_steps_that_decided_it(failing):
    """report.json's failures[].chain and summary.md's lines under a failure are the oracle's
    decision trace: the deciding step (the failure's rule and reason) and the steps it followed
    from, here the publication of request 0 that the trimmed hit would have reused."""
    doc, _ = _load(failing)
    _, case = _case(doc, FAILING)
    failed = next(f for f in case["failures"] if f["what"] == "responses[1].context_cache.reused_tokens")
    chain = failed["chain"]
    assert chain[-1]["rule"] == failed["rule"] == "CR-MEDIA-3" and chain[-1]["why"] == failed["why"]
    assert any(s["rule"] == "CR-PUB-1" and s["request"] == 0 for s in chain[:-1])
    summary = (failing / "summary.md").read_text()
    assert f"  - CR-MEDIA-3 (request 1) reused_tokens: {failed['why']}" in summary


def test_every_run_writes_the_page_and_kvconform_report_writes_it_again(failing, capsys):
    doc, page = _load(failing)
    _assert_page(doc, page)
    assert "NOT CONFORMANT" in page and "Re-run it against the same backend" in page
    k, case = _case(doc, FAILING)
    assert f'href="{case["reproducer"]}"' in page
    before = (failing / "report.html").read_bytes()
    (failing / "report.html").unlink()
    assert kvconform(["report", str(failing)]) == 0
    assert (failing / "report.html").read_bytes() == before, "the page is a function of report.json alone"


def test_kvconform_report_refuses_bad_input(tmp_path, capsys):
    assert kvconform(["report", str(tmp_path / "missing")]) == 2
    assert "not a report folder" in capsys.readouterr().err
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "report.json").write_text('{"format": "kvconform-report-v1", "cases": []}')
    assert kvconform(["report", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "report.json" in err and "Traceback" not in err
    assert not (tmp_path / "r" / "report.html").exists()


def test_a_conformant_default_run_renders(tmp_path):
    assert kvconform(["run", "--no-generated", "--no-progress", "--device", "cpu", "-k", FAILING,
                      "--report", str(tmp_path / "r")]) == 0
    doc, page = _load(tmp_path / "r")
    assert doc["summary"]["headline"] == "CONFORMANT" and doc["summary"]["verdicts"]["FAIL"] == 0
    _assert_page(doc, page)
    assert all(r["first_difference"] is None for r in doc["cases"][0]["details"]["page_map"]["requests"])


def test_a_fixed_engine_run_renders_at_the_engines_page_size(tmp_path):
    engine = tmp_path / "engine"
    subprocess.run([sys.executable, "-m", "gpu_backend", "build", "--engineDir", str(engine), "--maxKVPoolPages", "0",
                    "--tokensPerPage", "16", "--vision", "--maxInputLen", "512", "--maxKVCacheCapacity", "640"],
                   check=True, cwd=ROOT)
    assert kvconform(["run", "--no-generated", "--no-progress", "--engine-dir", str(engine), "-k", FAILING,
                      "--report", str(tmp_path / "r")]) == 0
    doc, page = _load(tmp_path / "r")
    _assert_page(doc, page)
    pm = doc["cases"][0]["details"]["page_map"]
    assert pm["size"] == json.loads((engine / "config.json").read_text())["tokens_per_page"] == 16
    assert "as laid out for the engine" in page


def test_a_merge_of_shards_renders(tmp_path):
    common = ["run", "--no-generated", "--no-progress", "--device", "cpu", "-k", "media/trim"]
    for i in (1, 2):
        assert kvconform(common + ["--shard", f"{i}/2", "--report", str(tmp_path / f"s{i}")]) == 0
        assert (tmp_path / f"s{i}" / "report.html").is_file()
    assert kvconform(["merge", str(tmp_path / "m"), str(tmp_path / "s1"), str(tmp_path / "s2")]) == 0
    doc, page = _load(tmp_path / "m")
    _assert_page(doc, page)
    assert "Merged from shards 1/2, 2/2" in page and len(embedded_page_maps(page)) == len(doc["cases"]) >= 2


@pytest.fixture(scope="module")
def peer_failing(tmp_path_factory):
    """The bundled server's vllm-partial-block variant: it counts a partial block as cached."""
    from faulty_backends.servers import SERVER_VARIANTS
    folder = tmp_path_factory.mktemp("peer-html")
    variant = SERVER_VARIANTS["vllm-partial-block"]
    peer = variant.peer(build_engine(folder, "transformers-auto"))
    with serving(peer) as url:
        code, _ = run_peers(url, variant.profile, folder, "-k", "reuse/shared-system-prompt", "-k", "turns/feedback")
    assert code == 1
    return folder / "report"


def test_a_peer_server_run_renders_in_blocks(peer_failing):
    from reference import peers
    doc, page = _load(peer_failing)
    _assert_page(doc, page)
    case = next(c for c in doc["cases"] if c["verdict"] == "FAIL")
    pm = case["details"]["page_map"]
    B = doc["peer"]["settings"]["block_size"]
    assert pm["unit"] == "block" and pm["size"] == B
    failed = next(f for f in case["failures"] if f["rule"] == "PEER-VLLM-3")
    row = pm["requests"][failed["request"]]
    assert (row["predicted"], row["reported"]) == (failed["expected"], failed["observed"])
    assert row["cap"] == peers.vllm_cached(row["n"], row["n"], B) == B * ((row["n"] - 1) // B)
    assert row["first_difference"]["page"] == min(row["predicted"], row["reported"]) // B


def test_a_large_report_stays_light(failing):
    """Thousands of cases: sections collapse, a bounded number of cases open, maps drawn on demand."""
    doc, _ = _load(failing)
    _, bad = _case(doc, FAILING)
    big = dict(doc, cases=[dict(bad, id=f"sections/media/copy-{k}") for k in range(2000)])
    start = time.monotonic()
    page = render(big)
    assert time.monotonic() - start < 10
    assert html_problems(page) == []
    assert page.count('<details class="case') == 2000 and page.count('data-verdict="FAIL" open>') == OPEN_CASES
    assert len(page) < 2000 * 12_000, "every case costs its map's JSON and a few lines, not a drawing"


def test_unknown_summary_fields_are_shown_and_missing_ones_tolerated(failing):
    doc, _ = _load(failing)
    doc = dict(doc, summary=dict(doc["summary"], selection={"narrowed": True, "selected": 2, "available": 165,
                                                            "filters": ["-k trim"]},
                                 sections=[{"section": "6 Publication", "judged": 0, "cases": 9}],
                                 thin_sections=["6 Publication"], a_field_from_a_later_kit="shown as it is"))
    for key in ("environment", "options", "tolerances", "plan"):
        doc.pop(key, None)
    doc["cases"] = [dict(c, details={}) for c in doc["cases"]]
    page = render(doc)
    assert html_problems(page) == []
    assert "a selection: 2 of 165 cases and families (-k trim)" in page and "6 Publication 0 of 9 judged" in page
    assert "a field from a later kit: shown as it is" in page
    assert "No page map" in page and embedded_page_maps(page) == {}


def test_a_long_file_keeps_the_requests_its_failures_name():
    from types import SimpleNamespace as NS
    from conformance.report.pagemap import case_page_map
    n = MAX_REQUESTS + 30
    requests = [NS(n=8, spans=[], lora_name=None) for _ in range(n)]
    parsed = NS(requests=requests, batches=[[i] for i in range(n)], lookup_policy="use_cache",
                commit_policy="including_generated_tokens")
    want = {"status": "ok", "context_cache": {"plan": "standard", "matched_tokens": 4, "reused_tokens": 4}}
    prediction = NS(parsed=parsed, responses=[want] * n, profile={}, generated=[], trace=None)
    flags = NS(enable_context_reuse=True, output_hidden_states=False, max_records=8, warmup=0,
               semantics_profile="kvconform-1")
    engine = NS(tokens_per_page=4, kind="vanilla", kv_pool_pages=64)
    failures = [Failure("CR-PLAN-1", f"responses[{n - 1}].context_cache.reused_tokens", 4, 0, "why", n - 1)]
    pm = case_page_map(engine, flags, prediction, None, None, failures)
    kept = [r["request"] for r in pm["requests"]]
    assert len(kept) == MAX_REQUESTS and n - 1 in kept and pm["omitted_requests"] == 30
    assert pm["requests"][-1]["observed"] is None and pm["requests"][-1]["rules"] == ["CR-PLAN-1"]


@pytest.mark.parametrize("expected, observed, what, position", [
    ({"reused_tokens": 8, "matched_tokens": 8}, {"reused_tokens": 4, "matched_tokens": 8}, "reused_tokens", 4),
    ({"reused_tokens": 4, "matched_tokens": 8}, {"reused_tokens": 4, "matched_tokens": 4}, "matched_tokens", 4),
    ({"reused_tokens": 0, "publications": [{"point": "decode_end", "tokens": 12, "pages": 3, "status": "committed"}]},
     {"reused_tokens": 0, "publications": [{"point": "decode_end", "tokens": 8, "pages": 2, "status": "committed"}]},
     "publications[0]", 8),
    ({"reused_tokens": 4, "plan": "standard"}, {"reused_tokens": 4, "plan": "full_input_rewind"}, "plan", 4),
    ({"reused_tokens": 4, "lookup_bypass": False}, {"reused_tokens": 4, "lookup_bypass": True}, "lookup_bypass", None),
    ({"reused_tokens": 4}, {"reused_tokens": 4}, None, None),
])
def test_the_first_difference(expected, observed, what, position):
    got = first_difference(expected, observed, 4, [])
    assert (got or {}).get("what") == what and (got or {}).get("position") == position
    if position is not None:
        assert got["page"] == position // 4


# --- in a real browser ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    exe = chromium()
    if exe is None:
        pytest.skip("no browser: Debian's chromium is not installed (`apt-get install -y chromium`; .ci/run does)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the test extra (playwright) is not installed")
    with sync_api.sync_playwright() as p:
        args = ["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
        b = p.chromium.launch(executable_path=exe, args=args, headless=True)
        try:
            yield b
        finally:
            b.close()


def _open(browser, path: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(5_000)
    problems = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request", lambda r: problems.append(f"fetch {r.url}") if not r.url.startswith(("file:", "data:"))
            else None)
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("html[data-pagemaps=ready]", timeout=10_000)
    return page, problems


def test_the_failing_request_is_drawn_in_a_browser(failing, browser):
    from playwright.sync_api import expect
    doc, _ = _load(failing)
    k, case = _case(doc, FAILING)
    fd = case["details"]["page_map"]["requests"][1]["first_difference"]
    page, problems = _open(browser, failing / "report.html")
    strip = page.locator(f'#case-{k} .req[data-request="1"]')
    assert strip.count() == 1, "the failing case opens with its failing request drawn"
    assert strip.locator(".diff-page").get_attribute("data-page") == str(fd["page"])
    assert strip.get_attribute("data-first-page") == str(fd["page"])
    assert strip.locator("text.reuse-exp").text_content() == f"oracle reused {fd['expected']}"
    assert strip.locator("text.reuse-obs").text_content() == f"backend reused {fd['observed']}"
    row = strip.locator('tr[data-fact="reused_tokens"]')
    assert row.get_attribute("class") == "differs"
    assert (row.locator("td.exp").text_content(), row.locator("td.obs").text_content()) == (
        str(fd["expected"]), str(fd["observed"]))
    assert strip.locator("line.split").count() == 1 and strip.locator("line.first-diff").count() == 1
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    strip.screenshot(path=str(ARTIFACTS / "report-html-failing-page-map.png"))
    assert (ARTIFACTS / "report-html-failing-page-map.png").stat().st_size > 2000
    # the agreeing request of the failing case, on demand
    assert page.locator(f'#case-{k} .req[data-request="0"]').count() == 0
    page.locator(f"#case-{k} button.more-requests").click()
    other = page.locator(f'#case-{k} .req[data-request="0"]')
    expect(other).to_have_count(1)  # drawn by the click handler; expect waits for it
    assert other.locator(".diff-page").count() == 0
    # a passing case, in a section that starts closed, is drawn when it is opened
    p, _ = _case(doc, PASSING)
    assert not page.locator(f"#case-{p}").is_visible()
    assert page.locator(f"#case-{p} .pagemap .req").count() == 0
    page.locator("#open-all").click()
    page.locator(f"#case-{p} > summary").click()
    # a <details> "toggle" event is dispatched after the click returns: wait for the drawing it starts
    expect(page.locator(f"#case-{p} .pagemap .req")).to_have_count(
        len(doc["cases"][p]["details"]["page_map"]["requests"]))
    assert problems == []
    page.close()


def test_the_peer_block_map_is_drawn_in_a_browser(peer_failing, browser):
    doc, _ = _load(peer_failing)
    k, case = next((k, c) for k, c in enumerate(doc["cases"]) if c["verdict"] == "FAIL")
    row = next(r for r in case["details"]["page_map"]["requests"] if r["first_difference"])
    page, problems = _open(browser, peer_failing / "report.html")
    strip = page.locator(f'#case-{k} .req[data-request="{row["request"]}"]')
    assert strip.locator(".diff-page").get_attribute("data-page") == str(row["first_difference"]["page"])
    assert strip.locator("text.reuse-exp").text_content() == f"oracle cached {row['predicted']}"
    assert strip.locator("text.reuse-obs").text_content() == f"server cached {row['reported']}"
    assert strip.locator("line.cap").count() == 1
    assert problems == []
    page.close()
