"""The HTML triage report in a real headless Chromium: no errors, no network, no XSS, and the
filters, sorting and details work, also with 5,000 steps.

Uses Debian's /usr/bin/chromium driven by Playwright (never `playwright install`). Without the
browser the tests skip, except on CI (CI=true) where they fail.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from synthetic_traces import llm_step, score_of, trace_of

from groundlens_core.trace import CallRecord, ContextPiece, Recorder, Step, Trace
from groundlens_core.trace.html import write_html

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
BOUND_S = 120.0  # a hang guard, not a speed target: timings are printed (-s); speed belongs in benchmarks/
#: Playwright's waits (navigation, clicks, selectors), for a browser on a loaded 2-core machine; its
#: default 30 s was within reach of loading the 5,000-step report there
WAIT_MS = 120_000

# each sets window.__xss or opens a dialog if it ever runs
PAYLOADS = [
    "<script>window.__xss = 1; alert(1)</script>",
    '"><img src=x onerror="window.__xss=2;alert(2)">',
    "</script><script>window.__xss = 3</script>",
    "<svg onload=window.__xss=4>",
]
RESPONSE_XSS = "Unrelated: " + PAYLOADS[0] + " and " + PAYLOADS[1]
CONTEXT = "The Eiffel Tower is 330 metres tall and stands in Paris, France. It was completed in 1889."


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} is missing: install it with `apt-get install -y chromium`"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=WAIT_MS)
        yield b
        b.close()


class Page:
    """A page plus everything it reported: console errors, page errors, dialogs, requests."""

    def __init__(self, browser, path: Path, width: int = 1400, height: int = 1000):
        self.page = browser.new_page(viewport={"width": width, "height": height})
        self.page.set_default_timeout(WAIT_MS)
        self.page.set_default_navigation_timeout(WAIT_MS)
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.page.on(
            "console", lambda m: self.console_errors.append(m.text) if m.type in ("error", "warning") else None
        )
        self.page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        self.page.on("dialog", self._dialog)
        self.page.on("request", lambda r: self.requests.append(r.url))
        t0 = time.perf_counter()
        self.page.goto(path.resolve().as_uri(), wait_until="load")
        self.page.wait_for_selector("html[data-gl-ready]", state="attached", timeout=WAIT_MS)
        self.load_s = time.perf_counter() - t0

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def assert_clean(self) -> None:
        assert self.console_errors == [], self.console_errors
        assert self.page_errors == [], self.page_errors
        assert self.dialogs == [], self.dialogs
        assert self.page.evaluate("window.__xss") is None
        external = [u for u in self.requests if not u.startswith(("file://", "data:"))]
        assert external == [], external

    def visible_rows(self) -> list[dict]:
        return self.page.evaluate("""() => Array.from(document.querySelectorAll('#gl-rows tr.gl-row'))
            .filter(tr => !tr.hidden).map(tr => ({id: tr.dataset.id, band: tr.dataset.band, node: tr.dataset.node,
                method: tr.dataset.method, score: tr.dataset.score === '' ? null : Number(tr.dataset.score)}))""")

    def timed(self, action_js: str) -> float:
        """Milliseconds for a synchronous UI action including the style/layout it causes."""
        return self.page.evaluate(f"""() => {{ const t = performance.now(); {action_js};
            void document.body.offsetHeight; return performance.now() - t; }}""")


# ---------------------------------------------------------------- the small report (real scoring)


@pytest.fixture(scope="module")
def small_report(tmp_path_factory) -> tuple[Path, Trace]:
    rec = Recorder("langgraph", name="tower-bot " + PAYLOADS[3])
    t = time.time()
    ctx = [ContextPiece(CONTEXT, "tool:wiki"), ContextPiece("Opening hours: 9:00 to 23:45.", PAYLOADS[1])]
    q = "How tall is the Eiffel Tower?"
    rec.record(CallRecord("r", "retrieve", kind="retrieval", context=ctx))

    def answer(response: str, **fields) -> CallRecord:
        return CallRecord("r", "answer", question=q, context=ctx, response=response, model="test-model", **fields)

    rec.record(
        answer(
            "The Eiffel Tower in Paris is 330 metres tall.", started_at=t, ended_at=t + 0.4, metadata={"grounded": True}
        )
    )
    rec.record(
        answer("Bananas are an excellent source of potassium and grow in tropical climates.", metadata={"grounded": False})
    )
    rec.record(
        CallRecord("r", PAYLOADS[1], question=PAYLOADS[0], context=ctx, response=RESPONSE_XSS, model=PAYLOADS[2])
    )
    rec.record(CallRecord("r", "tools", kind="tool_call", question=q))
    rec.record(CallRecord("r", "broken", question=q, response="x", error="RuntimeError: " + PAYLOADS[2]))
    rec.end_trace("r")
    trace = rec.get_trace("r")
    # hand-built DGI steps, so that the method filter has both methods whatever the bundled direction
    extra = [
        llm_step(
            10 + i,
            "planner",
            score_of(
                "dgi",
                band,
                v,
                (v + 1) / 2,
                explanation=f"DGI {v:.2f} (a triage signal for ranking, not a verdict of truth)",
                displacement_norm=0.9,
                direction="bundled:test",
            ),
            id=f"dgi{i}",
            question=f"plan step {i}",
            response=f"plan answer {i}",
        )
        for i, (v, band) in enumerate([(0.1, "flagged"), (0.4, "review"), (0.7, "trusted")])
    ]
    trace.steps.extend(extra)
    path = write_html(trace, tmp_path_factory.mktemp("html") / "report.html")
    return path, trace


@pytest.fixture()
def page(browser, small_report):
    p = Page(browser, small_report[0])
    yield p
    p.page.close()


def test_loads_without_errors_or_network_and_xss_stays_text(page, small_report):
    page.assert_clean()
    text = page.page.inner_text("#gl-rows")
    assert "<script>window.__xss = 1; alert(1)</script>" in text
    assert '"><img src=x onerror="window.__xss=2;alert(2)">' in text
    assert page.page.locator("#gl-rows img, #gl-rows script, #gl-rows svg").count() == 0
    assert "<svg onload=window.__xss=4>" in page.page.inner_text("h1")
    assert "not verdicts of truth" in page.page.inner_text("#gl-note")
    assert page.page.locator("#gl-rows tr.gl-row").count() == len(small_report[1].steps)


def test_expanding_a_row_shows_its_details_as_text(page, small_report):
    row = page.page.locator("#gl-rows tr.gl-row", has_text="Unrelated:")
    row.locator(".gl-toggle").click()
    detail = page.page.locator("#gl-rows tr.gl-detail").first
    assert detail.is_visible()
    assert row.locator(".gl-toggle").get_attribute("aria-expanded") == "true"
    body = detail.text_content()
    for piece in (
        "Question",
        "Response",
        "Explanation",
        "tool:wiki",
        CONTEXT,
        RESPONSE_XSS,
        PAYLOADS[0],
        PAYLOADS[1],
        "d(response, context)",
        "model",
    ):
        assert piece in body, piece
    # the detail row sits right below its row
    assert page.page.evaluate(
        "() => document.querySelector('tr.gl-detail').previousElementSibling.textContent.includes('Unrelated:')"
    )
    page.page.screenshot(path=str(_artifact("report.png")), full_page=True)
    print(f"\nscreenshot: {_artifact('report.png')}")
    row.locator(".gl-toggle").click()
    assert not detail.is_visible()
    page.assert_clean()


def test_response_sentences_are_tinted_by_support_with_evidence_and_marked_words(browser, tmp_path):
    source = (
        "Poseidon (film) . Poseidon grossed $ 181,674,817 at the worldwide box office on a budget of $ 160 million . "
        "The film was directed by Wolfgang Petersen."
    )
    summary = (
        "The film Poseidon, directed by Wolfgang Petersen, grossed $181,674,817 worldwide. "
        'It won three Oscars <img src=x onerror="window.__xss=5"> in 2007.'
    )
    rec = Recorder("langchain", name="summaries")
    rec.record(
        CallRecord("s", "summarise", question=None, context=[ContextPiece(source, "retriever")], response=summary)
    )
    rec.end_trace("s")
    trace = rec.get_trace("s")
    assert trace.steps[0].method == "support"
    page = Page(browser, write_html(trace, tmp_path / "evidence.html"))
    try:
        row = page.page.locator("#gl-rows tr.gl-row").first
        row.locator(".gl-toggle").click()
        sents = page.page.locator("#gl-rows tr.gl-detail .gl-resp-ev .gl-sent")
        assert sents.count() == 2
        assert "gl-sup-hi" in sents.nth(0).get_attribute("class")
        weakest = page.page.locator("#gl-rows .gl-resp-ev .gl-sent.gl-weakest")
        assert weakest.count() == 1 and "gl-sup-lo" in weakest.get_attribute("class")
        assert weakest.text_content() == summary[summary.index("It won") :]
        assert "best passage (similarity" in weakest.get_attribute("title")
        marked = page.page.locator("#gl-rows .gl-resp-ev mark.gl-unsup").all_text_contents()
        assert {"won", "three", "Oscars", "2007"} <= set(marked) and "181,674,817" not in marked
        # the response as a whole is still there, character for character
        assert page.page.locator("#gl-rows .gl-resp-ev").text_content() == summary
        page.page.locator("#gl-rows .gl-ev-details summary").click()
        evidence = page.page.locator("#gl-rows .gl-evidence li")
        assert evidence.count() == 2 and "weakest" in evidence.nth(1).text_content()
        assert "Poseidon grossed $ 181,674,817" in evidence.nth(0).text_content()
        assert page.page.locator("#gl-rows .gl-resp-ev img").count() == 0
        page.page.screenshot(path=str(_artifact("report-evidence.png")), full_page=True)
        page.assert_clean()
    finally:
        page.page.close()
    # redacted, the report shows no sentence (offsets would point into a hash) and no text of them
    html = write_html(trace, tmp_path / "redacted.html", redact=True).read_text(encoding="utf-8")
    assert "Oscars" not in html and "Petersen" not in html


def test_triage_filters_hide_other_rows(page, small_report):
    steps = small_report[1].steps
    flagged = sum(s.triage == "flagged" for s in steps if s.method in ("sgi", "dgi"))
    assert flagged >= 1
    page.page.click("button.gl-card[data-filter-band=flagged]")
    rows = page.visible_rows()
    assert len(rows) == flagged and {r["band"] for r in rows} == {"flagged"}
    assert page.page.get_attribute("#gl-shown", "data-matched") == str(flagged)
    page.page.click("#gl-reset")
    assert len(page.visible_rows()) == len(steps)
    # unticking one band hides exactly that band
    page.page.locator("#gl-f-bands input[value=skipped]").uncheck()
    rows = page.visible_rows()
    assert "skipped" not in {r["band"] for r in rows} and len(rows) == sum(s.method != "skipped" for s in steps)
    page.page.click("#gl-reset")
    page.page.select_option("#gl-f-node", "answer")
    assert {r["node"] for r in page.visible_rows()} == {"answer"}
    page.page.select_option("#gl-f-node", "")
    page.page.select_option("#gl-f-method", "dgi")
    assert {r["method"] for r in page.visible_rows()} == {"dgi"}
    page.page.click("#gl-reset")
    page.page.fill("#gl-f-text", "bananas")
    page.page.wait_for_function("() => document.querySelector('#gl-shown').dataset.matched === '1'")
    assert [r["node"] for r in page.visible_rows()] == ["answer"]
    # the per-node view filters too
    page.page.click("#gl-reset")
    page.page.click("#gl-nodes button[data-filter-node=planner]")
    assert {r["node"] for r in page.visible_rows()} == {"planner"} and len(page.visible_rows()) == 3
    page.assert_clean()


def test_clicking_the_score_header_sorts(page):
    scores = lambda: [r["score"] for r in page.visible_rows()]  # noqa: E731
    page.page.click("th[data-sort=score] button")
    assert page.page.get_attribute("th[data-sort=score]", "aria-sort") == "ascending"
    s = scores()
    known = [x for x in s if x is not None]
    assert len(known) >= 5 and known == sorted(known)
    assert s[: len(known)] == known  # steps without a score come last
    page.page.click("th[data-sort=score] button")
    assert page.page.get_attribute("th[data-sort=score]", "aria-sort") == "descending"
    s = scores()
    known = [x for x in s if x is not None]
    assert known == sorted(known, reverse=True) and s[: len(known)] == known
    # back to riskiest first
    page.page.click("th[data-sort=rank] button")
    assert page.page.get_attribute("th[data-sort=rank]", "aria-sort") == "ascending"
    ranks = page.page.evaluate(
        "() => Array.from(document.querySelectorAll('#gl-rows tr.gl-row')).map(t => +t.dataset.rank)"
    )
    assert ranks == sorted(ranks)
    page.assert_clean()


def test_sorting_keeps_an_open_detail_under_its_row(page):
    row = page.page.locator("#gl-rows tr.gl-row", has_text="Bananas")
    row.locator(".gl-toggle").click()
    page.page.click("th[data-sort=score] button")
    page.page.click("th[data-sort=node] button")
    assert page.page.evaluate("""() => { const d = document.querySelector('tr.gl-detail');
        return !d.hidden && d.previousElementSibling.textContent.includes('Bananas'); }""")
    # filtering it away hides its details too
    page.page.select_option("#gl-f-node", "planner")
    assert page.page.locator("tr.gl-detail").is_hidden()
    page.assert_clean()


# ---------------------------------------------------------------- 5,000 steps


def _big_trace(n: int = 5000) -> Trace:
    bands = ("flagged", "review", "trusted")
    steps = []
    for i in range(n):
        node = f"agent-{i % 9}"
        if i % 40 == 0:
            skipped = {"kind": "tool_call", "method": "skipped", "skip_reason": "the model only called tools"}
            steps.append(Step(id=f"s{i}", index=i, node=node, **skipped))
            continue
        if i % 151 == 0:
            failed = {"kind": "llm", "method": "error", "triage": "error", "error": "TimeoutError"}
            steps.append(Step(id=f"s{i}", index=i, node=node, question=f"question {i}", **failed))
            continue
        norm = (i * 7919 % 1000) / 1000
        method = "sgi" if i % 3 else "dgi"
        band = bands[min(2, int(norm * 3))]
        steps.append(
            llm_step(
                i,
                node,
                score_of(
                    method,
                    band,
                    norm * 2,
                    norm,
                    explanation=f"{method.upper()} {norm * 2:.2f}: synthetic (a triage signal, not a verdict of truth)",
                ),
                question=f"What happened in case {i}?",
                response=f"In case {i} the agent answered " + "with some words " * 15,
                context=(ContextPiece("Background document " * 10, "retriever"),) if method == "sgi" else (),
                llm_latency_ms=float(i % 900),
            )
        )
    return Trace(id="big", name="load test", framework="test", started_at="2025-01-01T00:00:00Z", steps=steps)


def test_5000_steps_load_sort_and_filter_quickly(browser, tmp_path):
    trace = _big_trace()
    t0 = time.perf_counter()
    path = write_html(trace, tmp_path / "big.html")
    render_s = time.perf_counter() - t0
    page = Page(browser, path, height=900)
    try:
        page.assert_clean()
        matched = lambda: int(page.page.get_attribute("#gl-shown", "data-matched"))  # noqa: E731
        assert matched() == 5000
        init_ms = page.page.evaluate("window.__glTimings.init")
        first_page = page.visible_rows()
        assert 0 < len(first_page) <= 100 and first_page[0]["band"] == "error"  # one page in the DOM, riskiest first

        sort_ms = page.timed("document.querySelector('th[data-sort=score] button').click()")
        scores = [r["score"] for r in page.visible_rows()]
        assert None not in scores and scores == sorted(scores)
        next_ms = page.timed("document.querySelector('#gl-next').click()")
        page2 = [r["score"] for r in page.visible_rows()]
        assert page2 == sorted(page2) and page2[0] >= scores[-1]  # the order continues on the next page
        sort2_ms = page.timed("document.querySelector('th[data-sort=score] button').click()")
        scores = [r["score"] for r in page.visible_rows()]
        assert scores == sorted(scores, reverse=True) and scores[0] == max(s.normalized for s in trace.scored_steps())

        filter_ms = page.timed("document.querySelector('button.gl-card[data-filter-band=flagged]').click()")
        flagged = trace.counts()["flagged"]
        assert matched() == flagged and {r["band"] for r in page.visible_rows()} == {"flagged"}
        node_ms = page.timed("""(() => { const s = document.querySelector('#gl-f-node'); s.value = 'agent-3';
            s.dispatchEvent(new Event('change', {bubbles: true})); })()""")
        expected = sum(s.node == "agent-3" for s in trace.steps if s.triage == "flagged" and s.method != "error")
        assert matched() == expected and {(r["node"], r["band"]) for r in page.visible_rows()} == {
            ("agent-3", "flagged")
        }
        text_t0 = time.perf_counter()
        page.page.click("#gl-reset")
        page.page.fill("#gl-f-text", "case 4321 ")
        page.page.wait_for_function("() => document.querySelector('#gl-shown').dataset.matched === '1'")
        search_s = time.perf_counter() - text_t0
        reset_ms = page.timed("document.querySelector('#gl-reset').click()")
        assert matched() == 5000
        expand_ms = page.timed("document.querySelector('#gl-rows tr.gl-row .gl-toggle').click()")
        assert page.page.locator("tr.gl-detail").first.is_visible()
        page.page.evaluate("() => window.scrollTo(0, 0)")
        page.page.screenshot(path=str(_artifact("report-5000.png")))
        print(
            f"\n5,000 steps: render {render_s:.2f} s, {path.stat().st_size / 1e6:.1f} MB; load {page.load_s:.2f} s "
            f"(script init {init_ms:.0f} ms); sort {sort_ms:.0f} / {sort2_ms:.0f} ms; next page {next_ms:.0f} ms; "
            f"filter band {filter_ms:.0f} ms, node {node_ms:.0f} ms, reset {reset_ms:.0f} ms; "
            f"search (incl. 120 ms debounce) {search_s * 1000:.0f} ms; expand {expand_ms:.0f} ms"
        )
        print(f"screenshot: {_artifact('report-5000.png')}")
        assert page.load_s < BOUND_S
        for ms in (sort_ms, sort2_ms, next_ms, filter_ms, node_ms, reset_ms, expand_ms, search_s * 1000):
            assert ms < BOUND_S * 1000
        page.assert_clean()
    finally:
        page.page.close()


def _artifact(name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name


def test_several_traces_filter_by_trace(browser, tmp_path):
    def step(i: int, node: str, v: float, band: str) -> Step:
        return llm_step(i, node, score_of("sgi", band, v, v / 2), id=f"{node}{i}", question=f"q{i}", response=f"r{i}")

    runs = [
        Trace(
            id=f"t{k}",
            name="nightly",
            framework="crewai",
            started_at="2025-01-01T00:00:00Z",
            steps=[step(0, "writer", 0.5 + k, "flagged" if k == 0 else "trusted"), step(1, "editor", 1.0, "review")],
        )
        for k in range(3)
    ]
    page = Page(browser, write_html(runs, tmp_path / "runs.html"))
    try:
        assert page.page.locator("#gl-traces tbody tr").count() == 3
        assert page.page.locator("#gl-rows tr.gl-row").count() == 6
        page.page.click("#gl-traces button[data-filter-trace='nightly #1']")
        rows = page.page.evaluate(
            "() => Array.from(document.querySelectorAll('#gl-rows tr.gl-row')).map(t => t.dataset.trace)"
        )
        assert rows == ["nightly #1", "nightly #1"]
        page.page.select_option("#gl-f-trace", "nightly #3")
        assert {r["id"] for r in page.visible_rows()} == {"writer0", "editor1"}
        assert page.page.get_attribute("#gl-shown", "data-matched") == "2"
        page.assert_clean()
    finally:
        page.page.close()


# ---------------------------------------------------------------- new fields, the index, the first screen


def _cascade_traces(n: int, payload: str = "") -> list[Trace]:
    """Hand-made traces of four steps with parent ids: plan (flagged every third trace) -> retrieve
    (a tool result) -> write (uses the plan's output) -> check."""
    claim = f"The warranty covers accidental damage for five full years {payload}."
    out = []
    for k in range(n):
        band = "flagged" if k % 3 == 0 else "trusted"

        def score(b, rank, fact=""):
            ev = None
            if fact:
                ev = {
                    "support": 0.5,
                    "content_tokens": 4,
                    "unsupported_tokens": 2,
                    "weakest": None,
                    "sentences": [],
                    "context_passages": 1,
                    "facts": [
                        {
                            "text": fact,
                            "kind": "number",
                            "start": 0,
                            "end": 3,
                            "sentence": 0,
                            "status": "contradicted",
                            "source": "2 " + payload,
                        }
                    ],
                }
            return score_of(
                "sgi",
                b,
                rank=rank,
                explanation=f"Score {rank:.2f}, {b}: reason {payload}. More.",
                fingerprint="fp",
                version="0",
                **({"evidence": ev} if ev else {}),
            )

        steps = [
            llm_step(
                0,
                "plan " + payload,
                score(band, 0.1 if band == "flagged" else 0.9, fact="5 " + payload if band == "flagged" else ""),
                id=f"p{k}",
                question="q " + payload,
                response=claim,
                model="m " + payload,
            ),
            Step(
                id=f"r{k}",
                index=1,
                parent_id=f"p{k}",
                node="retrieve",
                kind="retrieval",
                method="skipped",
                skip_reason="a tool or retriever result",
                context=(ContextPiece("Warranty: two years. " + payload, "tool:kb"),),
            ),
            llm_step(
                2,
                "write",
                score("trusted", 0.8),
                id=f"w{k}",
                parent_id=f"p{k}",
                question="q",
                context=(
                    ContextPiece("Warranty: two years. " + payload, "tool:kb"),
                    ContextPiece("Plan: " + claim, "state:plan"),
                ),
                response="Summary " + payload,
            ),
            llm_step(
                3,
                "check",
                score_of(
                    "dgi",
                    "review",
                    0.4,
                    0.6,
                    rank=0.45,
                    explanation="Score 0.45, review: no context: a weak signal.",
                    fingerprint="fp",
                    version="0",
                ),
                id=f"c{k}",
                parent_id=f"w{k}",
                question="q",
                response="ok",
            ),
        ]
        out.append(trace_of(steps, id=f"t{k}", name=f"run {k:03d} {payload}", ended_at="2025-01-01T00:00:01Z"))
    return out


def test_report_over_300_saved_traces_opens_on_an_index_with_node_flag_rates(browser, tmp_path):
    from groundlens_core.cli import main

    paths = []
    for t in _cascade_traces(300):
        paths.append(tmp_path / f"{t.id}.json")
        t.save(paths[-1])
    out = tmp_path / "index.html"
    assert main(["report", *map(str, paths), "-o", str(out)]) == 0
    page = Page(browser, out, height=900)
    try:
        assert page.page.locator("#gl-index").is_visible()
        assert page.page.get_attribute("#gl-t-shown", "data-matched") == "300"
        rates = page.page.evaluate("""() => Array.from(document.querySelectorAll('#gl-rates tbody tr'))
            .map(tr => [tr.dataset.rateNode, tr.cells[1].textContent.trim()])""")
        assert rates[0] == ["plan ", "33%"]  # 100 of 300 plan steps flagged: the node that misbehaves most
        assert dict(rates)["write"] == "0%"
        page.page.select_option("#gl-t-band", "cascade")
        assert page.page.get_attribute("#gl-t-shown", "data-matched") == "100"
        page.page.click("#gl-t-rows button[data-filter-trace='run 000 ']")
        assert {r["id"] for r in page.visible_rows()} == {"p0", "r0", "w0", "c0"}
        flow = page.page.locator("#gl-flow")
        assert flow.is_visible()
        # the tree: write under plan, the retriever's result under write (its consumer), check under write
        assert page.page.evaluate("""() => { const li = n => Array.from(document.querySelectorAll('#gl-flow li'))
              .find(l => l.querySelector('.gl-fname').textContent === n);
            const parent = n => li(n).parentElement.closest('li').querySelector('.gl-fname').textContent;
            return [parent('write'), parent('retrieve'), parent('check'),
                    li('retrieve').parentElement.className]; }""") == ["plan ", "write", "write", "gl-finputs"]
        # the cascade mark links to its origin row
        page.page.locator("#gl-rows tr.gl-row[data-id='w0'] button[data-goto]").click()
        assert page.page.locator("#gl-rows tr.gl-row.gl-open[data-id='p0']").count() == 1
        page.assert_clean()
    finally:
        page.page.close()


def test_first_screen_shows_the_riskiest_step_with_its_reason_model_and_mark(browser, tmp_path):
    traces = _cascade_traces(1)
    page = Page(browser, write_html(traces, tmp_path / "one.html"), height=900)
    try:
        first = page.page.locator("#gl-rows tr.gl-row").first
        assert first.get_attribute("data-id") == "p0"
        box = first.bounding_box()
        assert box is not None and box["y"] + box["height"] <= 900  # on the first screen at 1400x900
        assert first.locator(".gl-why").text_content() == "fact: 5  \u2014 the source says 2 "
        assert page.page.locator("#gl-about").get_attribute("open") is None  # header details folded
        second = page.page.locator("#gl-rows tr.gl-row").nth(1)
        assert second.get_attribute("data-id") == "w0" and "carries flagged output of" in second.text_content()
        assert "no context: weak signal" in page.page.locator("#gl-rows tr.gl-row[data-id='c0']").text_content()
        page.assert_clean()
    finally:
        page.page.close()


def test_new_fields_stay_inert_and_redaction_covers_them(browser, tmp_path):
    evil = " ".join(PAYLOADS)
    traces = _cascade_traces(2, evil)
    page = Page(browser, write_html(traces, tmp_path / "xss.html"))
    try:
        for k in range(page.page.locator("#gl-rows tr.gl-row").count()):
            page.page.locator("#gl-rows tr.gl-row").nth(k).locator(".gl-toggle").click()
        assert page.page.locator("#gl-rows .gl-why", has_text="<script>").count() >= 1  # reason shown as text
        assert page.page.locator(".gl-fact", has_text="<svg").count() >= 1  # facts as text
        assert page.page.locator("#gl-t-rows", has_text="<img").count() == 1  # index rows as text
        assert page.page.locator("#gl-report img, #gl-report script, #gl-report svg:not(#gl-histogram)").count() == 0
        page.assert_clean()
    finally:
        page.page.close()
    doc = (write_html(traces, tmp_path / "red.html", redact=True)).read_text(encoding="utf-8")
    for raw in ("warranty covers", "the source says 2 <"):  # responses, context, facts (node names are not texts)
        assert raw not in doc.lower()


def test_each_failed_finding_is_a_mark_whose_title_says_what_the_source_says(browser, tmp_path):
    from demo_trace import RETURNS_ANSWER, RETURNS_FINDINGS, record_returns

    rec = Recorder("test", name="returns")
    record_returns(rec)
    trace = rec.get_trace("returns")
    # a hand-made step whose finding and source are markup: its mark holds it as text
    response = "It costs " + PAYLOADS[0] + " per month."
    start = response.index(PAYLOADS[0])
    fact = {
        "text": PAYLOADS[0],
        "kind": "amount",
        "start": start,
        "end": start + len(PAYLOADS[0]),
        "sentence": 0,
        "status": "contradicted",
        "source": PAYLOADS[1],
    }
    sentence = {
        "start": 0,
        "end": len(response),
        "text": response,
        "support": 0.5,
        "content_tokens": 2,
        "unsupported": [{"text": "window", "kind": "word", "start": start + 8, "end": start + 14}],
        "similarity": 0.4,
        "passage_start": 0,
        "passage_end": 5,
        "passage": PAYLOADS[2],
    }
    trace.steps.append(Step(id="evil", index=1, node="evil", kind="llm", method="sgi", triage="flagged", response=response,
                            result={"method": "sgi", "value": 0.5, "normalized": 0.2, "triage": "flagged", "flagged": True,
                                   "rank": 0.01, "explanation": "hand-made", "fingerprint": "fp", "version": "0",
                                   "evidence": {"support": 0.5, "content_tokens": 2, "unsupported_tokens": 1, "weakest": 0,
                                                "context_passages": 1, "sentences": [sentence], "facts": [fact]}}))  # fmt: skip
    page = Page(browser, write_html(trace, tmp_path / "findings.html"))
    try:
        for k in range(2):
            page.page.locator("#gl-rows tr.gl-row").nth(k).locator(".gl-toggle").click()
        marks = page.page.evaluate("""() => Array.from(document.querySelectorAll('#gl-rows .gl-resp-ev mark.gl-finding'))
            .map(m => [m.closest('tr.gl-detail').previousElementSibling.dataset.id, m.textContent, m.title,
                       m.className, m.querySelectorAll('mark.gl-unsup').length])""")
        (answer,) = trace.steps[:1]
        mine = {(text, title) for sid, text, title, _, _ in marks if sid == answer.id}
        for chars, _, source in RETURNS_FINDINGS:
            assert any(text == chars and title.endswith("the source says " + source) for text, title in mine), chars
        assert len(mine) == len(answer.result.decision.findings)
        # the hand-made step: its payload is the mark's text and its source the title, run by nothing
        (evil,) = [m for m in marks if m[0] == "evil"]
        assert evil[1:4] == [
            PAYLOADS[0],
            PAYLOADS[0] + " \u2014 the source says " + PAYLOADS[1],
            "gl-finding gl-finding-contradicted",
        ]
        assert evil[4] == 1  # an unsupported word inside the finding stays marked within it
        # every response is still there, character for character
        texts = page.page.locator("#gl-rows .gl-resp-ev").all_text_contents()
        assert sorted(texts) == sorted([RETURNS_ANSWER, response])
        assert page.page.locator("#gl-rows .gl-resp-ev script, #gl-rows .gl-resp-ev img").count() == 0
        page.page.screenshot(path=str(_artifact("report-findings.png")), full_page=True)
        page.assert_clean()
    finally:
        page.page.close()


def test_a_batch_report_shows_each_rows_id_in_its_row(browser, tmp_path):
    """The Row column of a batch report is the file's id column (else "row <n>" from 1), not a
    0-based place in the file."""
    from cli_io import write_csv

    from groundlens_core.cli import main

    rows = [
        {
            "ref": "q-17",
            "query": "How tall is the Eiffel Tower?",
            "passage": CONTEXT,
            "answer": "The Eiffel Tower is 330 metres tall.",
        },
        {"ref": "q-18", "query": "When was it completed?", "passage": CONTEXT, "answer": "It was completed in 1925."},
    ]
    src = write_csv(tmp_path / "in.csv", rows)
    for extra, want in (([], ["row 1", "row 2"]), (["--id-col", "ref"], ["q-17", "q-18"])):
        html = tmp_path / "report.html"
        argv = [
            "evaluate",
            str(src),
            "-o",
            str(tmp_path / "out.csv"),
            "--html",
            str(html),
            "--question-col",
            "query",
            "--context-col",
            "passage",
            "--response-col",
            "answer",
            *extra,
        ]
        assert main(argv) == 0
        p = Page(browser, html)
        try:
            p.assert_clean()
            shown = p.page.evaluate("""() => Array.from(document.querySelectorAll('#gl-rows tr.gl-row'))
                .map(tr => [tr.dataset.id, tr.querySelector('td.gl-c-index').textContent])""")
            assert sorted(shown) == [[w, w] for w in want]  # the cell the reader sees is the row's id
            assert p.page.locator("th.gl-c-index").text_content().strip() == "Row"
        finally:
            p.page.close()


def test_the_traces_table_names_the_riskiest_step_by_node_band_and_risk_rank_never_as_a_number(browser, tmp_path):
    """ "#4 plan" read as the fourth step of the trace; the rank is the place in the review order."""
    page = Page(browser, write_html(_cascade_traces(3), tmp_path / "many.html"))
    try:
        header = page.page.locator("#gl-traces thead th").nth(4)
        assert header.text_content() == "Riskiest step" and "not a step number" in header.get_attribute("title")
        links = page.page.locator("#gl-t-rows button[data-goto]").all_text_contents()
        assert len(links) == 3 and all("#" not in text for text in links), links
        assert all(re.fullmatch(r".+ \((flagged|review|trusted|error), risk rank \d+\)", t) for t in links), links
        assert "plan  (flagged, risk rank 1)" in links  # the riskiest step of all: first in the review order
        casc = page.page.locator("#gl-rows tr.gl-row[data-id='w0'] button[data-goto]").first
        assert casc.text_content() == "plan  (risk rank 1)" and "not its position" in casc.get_attribute("title")
        page.assert_clean()
    finally:
        page.page.close()
