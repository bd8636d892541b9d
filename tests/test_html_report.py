"""The HTML triage report as a document: structure, ordering, escaping, offline-ness, redaction, scale.

Real traces come from a real Recorder scoring with the real embedding model; large and edge cases
use hand-built steps with score dicts.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import re
import time
from html.parser import HTMLParser
from importlib.resources import files

import pytest

from groundlens_core.trace import CallRecord, ContextPiece, Recorder, Step, Trace
from groundlens_core.trace.html import render_html, write_html
from groundlens_core.trace.model import redaction_digest

XSS_SCRIPT = "<script>alert(1)</script>"
XSS_ATTR = '"><img src=x onerror=alert(1)>'
CLOSE_JSON = "</script><script>alert(2)</script>"
CAPITAL_CONTEXT = "Paris is the capital of France. It has about 2.1 million inhabitants and lies on the Seine."


# ---------------------------------------------------------------- parsing helpers


class _ReportParser(HTMLParser):
    """Collects the step rows, script blocks, src/href attributes and the CSP of a report."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.scripts: list[tuple[dict[str, str], str]] = []
        self.urls: list[str] = []
        self.csp = ""
        self.svg_rects: list[dict[str, str]] = []
        self.node_rows: list[dict[str, str]] = []
        self._script: dict[str, str] | None = None
        self._buf: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        for key in ("src", "href", "action", "xlink:href", "poster", "srcset"):
            if key in a:
                self.urls.append(a[key])
        if tag == "tr" and "gl-row" in a.get("class", "").split():
            self.rows.append(a)
        if tag == "tr" and "data-node" in a and "gl-row" not in a.get("class", ""):
            self.node_rows.append(a)
        if tag == "rect":
            self.svg_rects.append(a)
        if tag == "meta" and a.get("http-equiv", "").lower() == "content-security-policy":
            self.csp = a.get("content", "")
        if tag == "script":
            self._script, self._buf = a, []

    def handle_data(self, data):
        if self._script is not None:
            self._buf.append(data)

    def handle_endtag(self, tag):
        if tag == "script" and self._script is not None:
            self.scripts.append((self._script, "".join(self._buf)))
            self._script = None


def parse(doc: str) -> _ReportParser:
    """The page's tags, and its step rows as the script builds them (``data-*`` attributes) from the
    embedded JSON: the server renders no step row itself."""
    p = _ReportParser()
    p.feed(doc)
    p.close()
    assert not p.rows, "step rows are built by the script, not rendered into the page"
    blocks = [body for attrs, body in p.scripts if attrs.get("type") == "application/json"]
    for r in json.loads(blocks[0])["rows"] if blocks else []:
        p.rows.append({"data-id": r["id"], "data-rank": str(r["rank"]), "data-band": r["band"], "data-node": r["node"],
                       "data-trace": r["trace"], "data-method": r["method"], "data-index": str(r["index"]),
                       "data-score": "" if r["score"] is None else repr(r["score"]), "reason": r["reason"],
                       "cascade": r["casc"], "model": r["model"], "tokens": r["tok"]})
    return p


def step_data(doc: str) -> list[dict]:
    """The JSON the page's script reads (the one ``application/json`` block)."""
    blocks = [body for attrs, body in parse(doc).scripts if attrs.get("type") == "application/json"]
    assert len(blocks) == 1
    return json.loads(blocks[0])["steps"]


def detail_of(data: list[dict], row: dict[str, str]) -> dict:
    """A row's entry in the page's JSON: rows are rendered in the same order (rank 1 = entry 0)."""
    return data[int(row["data-rank"]) - 1]


def score_step(i: int, node: str, method: str, value: float | None, normalized: float | None, triage: str | None, **kw) -> Step:
    score = None
    if method in ("sgi", "dgi"):
        score = {"method": method, "value": value, "normalized": normalized, "triage": triage, "flagged": triage == "flagged",
                 "explanation": f"{method.upper()} {value}: hand-built", "fingerprint": "fake-fp", "backend": "test", "version": "0"}
        if method == "sgi":
            score.update(d_response_question=0.8, d_response_context=0.5, context_mode="whole", context_chunks=1)
        else:
            score.update(displacement_norm=0.7, direction="bundled:test")
    return Step(id=kw.pop("id", f"s{i}"), index=i, node=node, kind=kw.pop("kind", "llm"), method=method, result=score,
                triage=triage if method != "skipped" else None, question=kw.pop("question", f"question {i}"),
                response=kw.pop("response", f"response {i}"), **kw)


def hand_trace(steps: list[Step], name: str = "hand-built", **kw) -> Trace:
    return Trace(id=kw.pop("id", "t-" + name), name=name, framework=kw.pop("framework", "test"), started_at="2025-01-01T00:00:00Z",
                 ended_at="2025-01-01T00:00:02Z", steps=steps, fingerprint="fake-fp", **kw)


# ---------------------------------------------------------------- a real scored trace


@pytest.fixture(scope="module")
def real_trace() -> Trace:
    rec = Recorder("langgraph", name="support-bot")
    t = time.time()
    ctx = [ContextPiece(CAPITAL_CONTEXT, "tool:search")]
    rec.record(CallRecord("run", "retrieve", kind="retrieval", context=ctx))
    rec.record(CallRecord("run", "answer", question="What is the capital of France?", context=ctx,
                          response="The capital of France is Paris, a city of about 2.1 million people on the Seine.",
                          model="test-model", started_at=t, ended_at=t + 0.25, metadata={"grounded": True}))
    rec.record(CallRecord("run", "answer", question="What is the capital of France?", context=ctx,
                          response=f"{XSS_SCRIPT} Bananas are yellow and rich in potassium. {XSS_ATTR}", model="test-model",
                          metadata={"grounded": False}))
    rec.record(CallRecord("run", "tools", kind="tool_call", question="What is the weather?"))
    rec.record(CallRecord("run", "broken", question="q", response="r", error="TimeoutError: upstream LLM timed out"))
    rec.end_trace("run")
    trace = rec.get_trace("run")
    assert trace is not None and len(trace.steps) == 5
    return trace


def _by_meta(trace: Trace, grounded: bool) -> Step:
    return next(s for s in trace.steps if s.metadata.get("grounded") is grounded)


def test_real_trace_report_has_header_cards_and_rows(real_trace):
    doc = render_html(real_trace)
    p = parse(doc)
    assert doc.startswith("<!DOCTYPE html>")
    assert "not verdicts of truth" in doc
    assert "support-bot" in doc and "langgraph" in doc
    assert real_trace.fingerprint and html.escape(real_trace.fingerprint) in doc
    assert real_trace.package_version in doc
    assert len(p.rows) == len(real_trace.steps)
    assert {r["data-id"] for r in p.rows} == {s.id for s in real_trace.steps}
    counts = real_trace.counts()
    for band, n in counts.items():
        assert re.search(rf'data-count="{band}">{n}<', doc), band
    assert re.search(rf'data-count="steps">{len(real_trace.steps)}<', doc)
    sgi = sum(s.method == "sgi" for s in real_trace.steps)
    assert sgi == 2 and re.search(rf'data-count="sgi">{sgi}<', doc)


def test_rows_are_riskiest_first(real_trace):
    p = parse(render_html(real_trace))
    ids = [r["data-id"] for r in p.rows]
    riskiest = [s.id for s in real_trace.riskiest()]
    assert ids[: len(riskiest)] == riskiest  # errors, flagged, review, trusted, lowest score first
    assert {r["data-band"] for r in p.rows[len(riskiest):]} == {"skipped"}
    assert [int(r["data-rank"]) for r in p.rows] == list(range(1, len(p.rows) + 1))
    assert p.rows[0]["data-band"] == "error" and p.rows[0]["data-node"] == "broken"


def test_grounded_answer_scores_above_off_topic_one(real_trace):
    grounded, off = _by_meta(real_trace, True), _by_meta(real_trace, False)
    assert grounded.method == off.method == "sgi"
    assert grounded.value > off.value
    rows = {r["data-id"]: r for r in parse(render_html(real_trace)).rows}
    assert float(rows[grounded.id]["data-score"]) > float(rows[off.id]["data-score"])
    # the off-topic answer is the riskier of the two, so it comes first
    assert int(rows[off.id]["data-rank"]) < int(rows[grounded.id]["data-rank"])


def test_details_carry_context_sources_explanation_and_distances(real_trace):
    doc = render_html(real_trace)
    data = step_data(doc)
    rows = parse(doc).rows
    grounded = _by_meta(real_trace, True)
    d = detail_of(data, next(r for r in rows if r["data-id"] == grounded.id))
    assert d["q"] == grounded.question and d["r"] == grounded.response
    retrieve = next(r for r in rows if r["data-node"] == "retrieve")
    # the context source links to the row of the step that produced it (the retriever)
    assert d["ctx"] == [["tool:search", CAPITAL_CONTEXT, "", int(retrieve["data-rank"]) - 1]]
    assert d["ex"] == grounded.explanation and "not a verdict of truth" in d["ex"]
    facts = dict(d["facts"])
    assert float(facts["d(response, question)"]) == pytest.approx(grounded.result.d_response_question, abs=1e-4)
    assert float(facts["d(response, context)"]) == pytest.approx(grounded.result.d_response_context, abs=1e-4)
    assert facts["model"] == "test-model" and facts["method"] == "sgi"
    assert facts["LLM latency"].endswith(" ms")
    assert json.loads(d["meta"]) == {"grounded": True}
    err = detail_of(data, next(r for r in rows if r["data-node"] == "broken"))
    assert "TimeoutError" in err["err"]
    skipped = detail_of(data, next(r for r in rows if r["data-node"] == "tools"))
    assert skipped["skip"] == "the model only called tools"


def test_llm_text_is_escaped_everywhere():
    evil = [XSS_SCRIPT, XSS_ATTR, CLOSE_JSON, "<!-- x", "{{ 7*7 }}"]
    steps = [score_step(0, node=XSS_ATTR, method="sgi", value=0.5, normalized=0.2, triage="flagged", question=XSS_SCRIPT,
                        response=" ".join(evil), context=(ContextPiece(CLOSE_JSON, XSS_ATTR),), model=XSS_SCRIPT,
                        metadata={"note": CLOSE_JSON}),
             score_step(1, node="ok", method="error", value=None, normalized=None, triage="error", error=XSS_SCRIPT)]
    doc = render_html(hand_trace(steps, name=XSS_SCRIPT), title=XSS_ATTR)
    for raw in (XSS_SCRIPT, XSS_ATTR, "<img", "alert(2)</script>", "<!-- x"):
        assert raw not in doc, raw
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in doc  # shown as text in the row preview
    p = parse(doc)
    assert [r["data-node"] for r in p.rows] == ["ok", XSS_ATTR]  # error first; attribute values round-trip as text
    (attrs, body), = [(a, b) for a, b in p.scripts if a.get("type") == "application/json"]
    assert "<" not in body and ">" not in body
    d = json.loads(body)["steps"][1]  # rows and entries are riskiest first: the error step is entry 0
    assert d["r"] == " ".join(evil) and d["q"] == XSS_SCRIPT and d["ctx"] == [[XSS_ATTR, CLOSE_JSON, "", None]]
    assert "{{ 7*7 }}" in d["r"] and "49" not in d["r"]
    # the only executable script is ours, and the CSP allows exactly it
    code = [b for a, b in p.scripts if a.get("type") != "application/json"]
    assert len(code) == 1 and len(p.scripts) == 2
    digest = base64.b64encode(hashlib.sha256(code[0].encode("utf-8")).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in p.csp
    assert "default-src 'none'" in p.csp and "unsafe-inline" not in p.csp.split("script-src")[1].split(";")[0]


def test_each_failed_finding_is_marked_in_the_response_with_what_the_source_says():
    from demo_trace import RETURNS_ANSWER, RETURNS_FINDINGS, record_returns

    rec = Recorder("test", name="returns")
    record_returns(rec)
    trace = rec.get_trace("returns")
    (d,) = step_data(render_html(trace))
    (step,) = trace.steps
    assert d["r"] == RETURNS_ANSWER
    marks = {(RETURNS_ANSWER[a:b], status): title for a, b, status, title in d["fm"]}
    assert len(d["fm"]) == len(step.result.decision.findings)
    for chars, status, source in RETURNS_FINDINGS:
        assert marks[(chars, status)].endswith(f" \u2014 the source says {source}")
    # not shown whole, the response has no marks: their offsets would point into a digest or a cut
    assert step_data(render_html(trace, redact=True))[0]["fm"] == []
    assert step_data(render_html(trace, max_text_chars=20))[0]["fm"] == []


def test_finding_marks_carry_llm_and_source_text_as_data_only():
    response = f"It costs {XSS_SCRIPT} per month."
    start = response.index(XSS_SCRIPT)
    fact = {"text": XSS_SCRIPT, "kind": "amount", "start": start, "end": start + len(XSS_SCRIPT), "sentence": 0,
            "status": "contradicted", "source": XSS_ATTR}  # fmt: skip
    evidence = {"support": 0.5, "content_tokens": 2, "unsupported_tokens": 1, "weakest": 0, "context_passages": 1,
                "sentences": [{"start": 0, "end": len(response), "text": response, "support": 0.5, "content_tokens": 2,
                               "unsupported": [{"text": "script", "kind": "word", "start": start + 1, "end": start + 7}],
                               "similarity": 0.4, "passage_start": 0, "passage_end": 5, "passage": CLOSE_JSON}],
                "facts": [fact, {**fact, "status": "supported", "start": 0, "end": 2}]}  # fmt: skip
    step = score_step(0, "n", "sgi", 0.5, 0.2, "flagged", response=response)
    step = Step(**{**step.__dict__, "result": {**step.result.to_dict(), "evidence": evidence}})
    doc = render_html(hand_trace([step]))
    for raw in (XSS_SCRIPT, XSS_ATTR, "alert(2)</script>"):
        assert raw not in doc, raw
    (attrs, body), = [(a, b) for a, b in parse(doc).scripts if a.get("type") == "application/json"]
    assert "<" not in body and ">" not in body
    (d,) = json.loads(body)["steps"]
    # only the failed finding is marked, with the source's words as its title (text for the page's script)
    title = f"{XSS_SCRIPT} \u2014 the source says {XSS_ATTR}"
    assert d["fm"] == [[start, start + len(XSS_SCRIPT), "contradicted", title]]
    assert d["r"][d["fm"][0][0] : d["fm"][0][1]] == XSS_SCRIPT


def test_no_external_urls(real_trace):
    doc = render_html([real_trace, hand_trace([score_step(0, "n", "dgi", 0.1, 0.55, "flagged")])])
    p = parse(doc)
    assert all(u.startswith("data:") for u in p.urls), p.urls
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//""", doc, re.I)
    assert "http://" not in doc and "https://" not in doc
    assert "@import" not in doc and "url(" not in doc


def test_redaction_removes_every_text(real_trace):
    doc = render_html(real_trace, redact=True)
    grounded = _by_meta(real_trace, True)
    for raw in (grounded.question, grounded.response, CAPITAL_CONTEXT, "Bananas are yellow", "What is the capital"):
        assert raw not in doc, raw
    assert "redacted" in doc
    keyed = redaction_digest(grounded.response)[:12]
    unkeyed = hashlib.sha256(grounded.response.encode()).hexdigest()[:12]  # a guess could be confirmed by it
    data = step_data(doc)
    row = next(r for r in parse(doc).rows if r["data-id"] == grounded.id)
    d = detail_of(data, row)
    assert keyed in d["r"] and d["rn"] == "redacted" and d["qn"] == "redacted"
    assert unkeyed not in doc
    assert d["ctx"][0][0] == "tool:search" and d["ctx"][0][2] == "redacted"
    assert d["meta"] == ""  # metadata may hold user text: not shown when redacting
    # the scores survive redaction
    assert float(row["data-score"]) == pytest.approx(grounded.score, abs=1e-5)  # the score shown is the score ranked


def test_max_text_chars_cuts_long_texts():
    long_text = "word " * 400
    step = score_step(0, "n", "sgi", 1.3, 0.76, "trusted", response=long_text, context=(ContextPiece(long_text, "retriever"),))
    doc = render_html(hand_trace([step]), max_text_chars=50)
    assert long_text not in doc and long_text.strip() not in doc
    d = step_data(doc)[0]
    assert d["r"] == long_text[:50] and d["rn"] == f"cut: {len(long_text):,} chars in all"
    assert d["ctx"][0][1] == long_text[:50]
    assert "cut to 50 characters" in doc


def test_several_traces_in_one_report(real_trace):
    a = hand_trace([score_step(0, "plan", "dgi", 0.1, 0.55, "flagged"), score_step(1, "write", "sgi", 1.4, 0.8, "trusted")], name="batch", id="a")
    b = hand_trace([score_step(0, "plan", "dgi", 0.6, 0.8, "trusted")], name="batch", id="b", status="error", error="ValueError: boom")
    doc = render_html([a, b, real_trace])
    p = parse(doc)
    assert len(p.rows) == 3 + len(real_trace.steps)
    assert {r["data-trace"] for r in p.rows} == {"batch #1", "batch #2", "support-bot"}
    assert 'id="gl-f-trace"' in doc and 'id="gl-traces"' in doc
    assert "groundlens triage: 3 traces" in doc and "ValueError: boom" in doc
    flagged_plan = next(r for r in p.rows if r["data-node"] == "plan" and r["data-band"] == "flagged")
    assert flagged_plan["data-trace"] == "batch #1"
    # riskiest first across traces: every error before every flagged before every review ...
    order = {"error": 0, "flagged": 1, "review": 2, "trusted": 3, "skipped": 4}
    ranks = [order[r["data-band"]] for r in p.rows]
    assert ranks == sorted(ranks)
    # the per-node view merges a node across traces
    node = {r["data-node"]: r for r in p.node_rows}
    assert set(node) == {s.node for s in real_trace.steps} | {"plan", "write"}


def test_node_view_mean_and_worst_band():
    steps = [score_step(0, "alpha", "sgi", 1.3, 0.8, "trusted"), score_step(1, "alpha", "sgi", 1.0, 0.6, "review"),
             score_step(2, "beta", "dgi", 0.2, 0.3, "flagged"), score_step(3, "beta", "skipped", None, None, None),
             score_step(4, "gamma", "error", None, None, "error")]
    doc = render_html(hand_trace(steps))
    section = doc.split('id="gl-nodes"')[1].split("</table>")[0]
    rows = re.findall(r'<tr data-node="([^"]+)">(.*?)</tr>', section, re.S)
    assert [n for n, _ in rows] == ["gamma", "beta", "alpha"]  # worst first
    cells = {n: re.findall(r"<td[^>]*>(.*?)</td>", body, re.S) for n, body in rows}
    assert cells["alpha"][1] == "2" and cells["alpha"][2] == f"{(0.8 + 0.6) / 2:.2f}" and "review" in cells["alpha"][3]
    assert cells["beta"][2] == "0.30" and "flagged" in cells["beta"][3]
    assert cells["gamma"][2] == "-" and "error" in cells["gamma"][3]


def test_histogram_counts_scored_steps_by_band():
    steps = [score_step(i, "n", "sgi", 1.0, (i % 10) / 10 + 0.05, ("flagged", "review", "trusted")[i % 3]) for i in range(30)]
    steps.append(score_step(30, "n", "skipped", None, None, None))
    steps.append(score_step(31, "n", "error", None, None, "error"))
    p = parse(render_html(hand_trace(steps)))
    bars = [r for r in p.svg_rects if "gl-bar" in r.get("class", "")]
    assert {b["data-band"] for b in bars} == {"flagged", "review", "trusted"}
    doc = render_html(hand_trace(steps))
    titles = re.findall(r"<title>score [0-9.]+-[0-9.]+: (\d+) (\w+)</title>", doc)
    totals: dict[str, int] = {}
    for n, band in titles:
        totals[band] = totals.get(band, 0) + int(n)
    assert totals == {"flagged": 10, "review": 10, "trusted": 10}
    assert all(float(b["height"]) > 0 for b in bars)


def test_edge_cases_do_not_break_rendering():
    odd = [
        score_step(0, "n", "sgi", float("nan"), float("nan"), "flagged"),
        score_step(1, "n", "dgi", 0.4, "not-a-number", "review"),
        Step(id="x", index=2, node="n", kind="llm", method="sgi", result=None, triage=None),
        score_step(3, "n\u2028line", "sgi", 1.5, 0.9, "trusted", response="emoji \U0001F600 and \u2028 separators", question=None),
        score_step(4, "n", "sgi", 1.5, 0.9, "trusted", response={"redacted": True, "sha256": "ab" * 32, "length": 9}),
    ]
    doc = render_html(hand_trace(odd))
    data = step_data(doc)
    assert len(data) == len(odd) and "NaN" not in doc.split('id="gl-data"')[1]
    assert any(d["r"] == "emoji \U0001F600 and \u2028 separators" for d in data)
    assert any(d["rn"] == "redacted" for d in data)
    empty = render_html(hand_trace([]))
    assert "No steps recorded." in empty and len(parse(empty).rows) == 0
    assert "<table" in render_html([])  # no trace at all still gives a page


def test_accepts_trace_dicts_and_writes_files(real_trace, tmp_path):
    as_dict = json.loads(real_trace.to_json())
    assert parse(render_html(as_dict)).rows == parse(render_html(real_trace)).rows
    out = write_html(real_trace, tmp_path / "deep" / "report.html", title="Nightly run")
    assert out == tmp_path / "deep" / "report.html" and out.is_file()
    assert "<title>Nightly run</title>" in out.read_text(encoding="utf-8")
    with pytest.raises(TypeError):
        render_html(["not a trace"])


def test_templates_ship_as_package_data():
    pkg = files("groundlens_core.templates")
    for name in ("report.html.j2", "report.css", "report.js"):
        assert pkg.joinpath(name).is_file(), name
    from groundlens_core.trace.html import _environment

    env = _environment()
    assert env.autoescape is True or env.autoescape("anything.txt") is True


def test_5000_steps_render_riskiest_first():
    bands = ("flagged", "review", "trusted")
    steps = []
    for i in range(5000):
        if i % 50 == 0:
            steps.append(score_step(i, f"node-{i % 7}", "skipped", None, None, None))
        elif i % 97 == 0:
            steps.append(score_step(i, f"node-{i % 7}", "error", None, None, "error", error="boom"))
        else:
            norm = (i * 7919 % 1000) / 1000
            steps.append(score_step(i, f"node-{i % 7}", "sgi" if i % 2 else "dgi", norm * 2, norm, bands[min(2, int(norm * 3))],
                                    response=f"response {i} " + "lorem ipsum " * 20, context=(ContextPiece("ctx " * 30, "retriever"),)))
    trace = hand_trace(steps)
    t0 = time.perf_counter()
    doc = render_html(trace)
    elapsed = time.perf_counter() - t0
    print(f"\nrendered 5,000 steps in {elapsed:.2f} s, {len(doc) / 1e6:.1f} MB")
    p = parse(doc)
    assert len(p.rows) == 5000
    norms = [float(r["data-score"]) for r in p.rows if r["data-score"]]
    assert not any(math.isnan(x) for x in norms)
    first_flagged = [float(r["data-score"]) for r in p.rows if r["data-band"] == "flagged"]
    assert first_flagged == sorted(first_flagged)  # lowest score first within a band


def test_traces_whose_names_collide_with_a_numbered_label_each_keep_their_own_rows():
    """Traces named x, x and "x #2" were labelled x #1, x #2, x #2: the filter of the third showed
    the rows of two traces."""
    traces = [
        hand_trace(
            [score_step(k, f"node-{ti}-{k}", "sgi", 1.2, 0.6, "trusted") for k in range(ti + 1)], name=n, id=f"t{ti}"
        )
        for ti, n in enumerate(["x", "x", "x #2"])
    ]
    doc = render_html(traces)
    blocks = [body for attrs, body in parse(doc).scripts if attrs.get("type") == "application/json"]
    labels = [t["label"] for t in json.loads(blocks[0])["traces"]]
    assert len(set(labels)) == 3 and labels[2] == "x #2", labels
    rows = parse(doc).rows
    for ti, label in enumerate(labels):  # a trace's filter shows exactly its own steps
        assert sorted(r["data-node"] for r in rows if r["data-trace"] == label) == [
            f"node-{ti}-{k}" for k in range(ti + 1)
        ]


def test_calls_sharing_a_step_id_are_three_steps_and_three_rows():
    """An adapter that gives three calls one step id: each is its own step (the report showed one row
    for the three), the duplicates re-keyed with the adapter's id kept in their metadata."""
    rec = Recorder("test", max_traces=2)
    returned = [
        rec.record(CallRecord(trace_key="k", node=f"lookup-{i}", kind="tool", response=f"result {i}", step_id="run-1"))
        for i in range(3)
    ]
    trace = rec.get_trace("k")
    ids = [s.id for s in trace.steps]
    assert ids == returned == ["run-1", "run-1-2", "run-1-3"]
    assert [s.metadata.get("original_step_id") for s in trace.steps] == [None, "run-1", "run-1"]
    rows = parse(render_html(trace)).rows
    assert sorted(r["data-node"] for r in rows) == ["lookup-0", "lookup-1", "lookup-2"]
    # an id that happens to be a re-keyed one already is re-keyed in turn, never shared
    rec.record(CallRecord(trace_key="k", node="late", kind="tool", response="late", step_id="run-1-2"))
    assert len({s.id for s in rec.get_trace("k").steps}) == 4
    # another trace may use the same id; the ids of evicted traces are forgotten (bounded memory)
    for key in ("k2", "k3", "k4"):
        assert rec.record(CallRecord(trace_key=key, node="n", kind="tool", response="r", step_id="run-1")) == "run-1"
    assert sorted(rec._store.step_ids) == ["k3", "k4"]
