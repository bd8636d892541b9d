"""``groundlens traces``: score stored spans from OTLP JSON files and from Langfuse (the real SDK
against a loopback server speaking Langfuse's observations and scores API).

The Phoenix source runs against a real Phoenix server: tests/test_traces_phoenix.py.
"""

from __future__ import annotations

import json
import urllib.parse
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from demo_trace import CONTEXT_SGI, GROUNDED, OFF_TOPIC, QUESTION_SGI
from fake_llm_server import Reply, Request
from review_servers import LangfuseServer
from stored_traces import T0_NS, write_runs

from groundlens_core.cli import main
from groundlens_core.trace.sources.job import Filters, run, trace_fraction
from groundlens_core.trace.sources.otlp_files import OtlpFiles


def _live_scores(calls: list[tuple[str, str, str]]) -> list[tuple[float, str]]:
    """(score, band) of each call recorded live, through a Recorder (retrieved context)."""
    from groundlens_core.trace import CallRecord, ContextPiece, Recorder

    recorder = Recorder("live")
    for q, c, r in calls:
        recorder.record(CallRecord("run", "answer", question=q, context=[ContextPiece(c, "retriever")], response=r))
    assert recorder.flush(timeout=120)
    return [(s.score, s.band) for s in recorder.get_trace("run").steps]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _traces(tmp_path: Path, *args: str, capsys=None) -> tuple[int, dict]:
    code = main(["traces", *args, "--json"])
    summary = json.loads(capsys.readouterr().out) if capsys is not None else {}
    return code, summary


# ---------------------------------------------------------------- OTLP JSON files


def test_otlp_file_spans_are_scored_with_the_retrieved_documents_of_their_trace(tmp_path, capsys):
    src, out = tmp_path / "spans.jsonl", tmp_path / "scores.jsonl"
    ids = write_runs(src, [GROUNDED, OFF_TOPIC])
    code, summary = _traces(tmp_path, "otlp", str(src), "-o", str(out), capsys=capsys)
    assert code == 0
    lines = _lines(out)
    assert [(r["trace_id"], r["span_id"]) for r in lines] == ids  # the LLM spans only, one line each
    grounded, off = lines
    for r in lines:
        assert r["method"] == "sgi"
        assert r["step"]["question"] == QUESTION_SGI  # the persona system message is neither question nor context
        assert r["step"]["context"] == [{"source": "retriever", "text": CONTEXT_SGI}]
        assert r["step"]["model"] == "gpt-test" and r["step"]["usage"]["input_tokens"] == 42
    assert grounded["step"]["response"] == GROUNDED and off["step"]["response"] == OFF_TOPIC
    assert off["score"] < grounded["score"]
    # scored as the live path scores the same call: the same score and band, to the bit
    live = _live_scores([(QUESTION_SGI, CONTEXT_SGI, GROUNDED), (QUESTION_SGI, CONTEXT_SGI, OFF_TOPIC)])
    assert [(r["score"], r["band"]) for r in lines] == live
    assert summary["spans"] == 2 and summary["traces"] == 2
    assert sum(summary["bands"].values()) == 2


def test_sample_keeps_the_same_traces_by_trace_id_and_counts_the_rest(tmp_path, capsys):
    src = tmp_path / "spans.jsonl"
    ids = write_runs(src, [GROUNDED] * 12)
    expected = {t for t, _ in ids if trace_fraction(t) < 0.5}
    assert 0 < len(expected) < 12  # the sample below leaves some out and keeps some
    runs = []
    for k in range(2):
        out = tmp_path / f"out{k}.jsonl"
        _, summary = _traces(tmp_path, "otlp", str(src), "--sample", "0.5", "-o", str(out), capsys=capsys)
        runs.append({r["trace_id"] for r in _lines(out)})
        assert summary["skipped"] == {"not sampled (--sample)": 12 - len(expected)}
    assert runs[0] == runs[1] == expected


def test_time_window_and_names_choose_the_spans(tmp_path, capsys):
    src, out = tmp_path / "spans.jsonl", tmp_path / "out.jsonl"
    ids = write_runs(src, [GROUNDED, GROUNDED, GROUNDED])  # runs start 1 s apart from T0
    t1 = datetime.fromtimestamp(T0_NS / 1e9 + 1, tz=timezone.utc).isoformat()
    _traces(tmp_path, "otlp", str(src), "--since", t1, "-o", str(out), capsys=capsys)
    assert [r["span_id"] for r in _lines(out)] == [s for _, s in ids[1:]]
    _traces(tmp_path, "otlp", str(src), "--until", t1, "-o", str(out), capsys=capsys)
    assert [r["span_id"] for r in _lines(out)] == [ids[0][1]]
    _, summary = _traces(tmp_path, "otlp", str(src), "--name", "no-such-span", "-o", str(out), capsys=capsys)
    assert _lines(out) == [] and summary["spans"] == 0
    _traces(tmp_path, "otlp", str(src), "--kind", "retriever", "-o", str(out), capsys=capsys)
    assert {r["skip_reason"] for r in _lines(out)} == {"no response text"} and len(_lines(out)) == 3


def test_a_state_file_resumes_and_a_rerun_adds_nothing(tmp_path, capsys):
    src, out, state = tmp_path / "spans.jsonl", tmp_path / "out.jsonl", tmp_path / "state.json"
    write_runs(src, [GROUNDED, OFF_TOPIC])
    args = ["otlp", str(src), "-o", str(out), "--state", str(state)]
    _, first = _traces(tmp_path, *args, capsys=capsys)
    assert first["spans"] == 2 and len(_lines(out)) == 2
    saved = json.loads(state.read_text())
    assert saved["source"] == "otlp" and saved["last_span"]["span_id"] == _lines(out)[-1]["span_id"]
    _, again = _traces(tmp_path, *args, capsys=capsys)
    assert again["spans"] == 0 and len(_lines(out)) == 2  # nothing new: nothing scored, nothing appended
    more = tmp_path / "more.jsonl"
    new_ids = write_runs(more, [GROUNDED])
    with open(src, "a", encoding="utf-8") as f:  # the Collector appends to its file
        f.write(more.read_text(encoding="utf-8"))
    _, third = _traces(tmp_path, *args, capsys=capsys)
    assert third["spans"] == 1
    assert [r["span_id"] for r in _lines(out)][2:] == [new_ids[0][1]]


def test_a_state_file_of_another_source_is_refused(tmp_path, capsys):
    src, state = tmp_path / "spans.jsonl", tmp_path / "state.json"
    write_runs(src, [GROUNDED])
    state.write_text(json.dumps({"version": 1, "source": "phoenix:prod", "position": {"after": "x"}}))
    assert main(["traces", "otlp", str(src), "-o", str(tmp_path / "o.jsonl"), "--state", str(state)]) != 0
    assert "is for 'phoenix:prod', not 'otlp'" in capsys.readouterr().err


def test_bad_lines_and_failed_calls_are_counted_never_a_crash(tmp_path, capsys):
    src, out = tmp_path / "spans.jsonl", tmp_path / "out.jsonl"
    write_runs(src, [GROUNDED])
    bad = tmp_path / "bad.jsonl"
    from stored_traces import collector_line, provider_with_memory, rag_run

    provider, memory = provider_with_memory()
    rag_run(provider.get_tracer("t"), GROUNDED, at_ns=T0_NS + 5_000_000_000, error="RateLimitError: slow down")
    bad.write_text("{not json\n" + collector_line(memory.get_finished_spans()) + "\n")
    code, summary = _traces(tmp_path, "otlp", str(src), str(bad), "-o", str(out), capsys=capsys)
    assert code == 0
    lines = _lines(out)
    assert [r["method"] for r in lines] == ["sgi", "error"] and lines[1]["band"] == "error"
    assert "RateLimitError: slow down" in lines[1]["error"]
    assert summary["errors"] == {lines[1]["error"]: 1}
    (why,) = summary["skipped"]
    assert why.startswith("an unreadable line in bad.jsonl") and summary["skipped"][why] == 1


def _synthetic_file(path: Path, traces: int) -> int:
    """``traces`` traces of 4 spans (root, retriever, tool, LLM without an answer), written by hand in
    the Collector's format, 20 spans a line, children before their root. Returns the span count."""

    def span(tid, sid, parent, name, kind, start):
        attrs = [{"key": "openinference.span.kind", "value": {"stringValue": kind}}]
        if kind == "RETRIEVER":
            attrs.append({"key": "retrieval.documents.0.document.content", "value": {"stringValue": CONTEXT_SGI}})
        if kind == "LLM":
            attrs.append({"key": "input.value", "value": {"stringValue": QUESTION_SGI}})
        return {
            "traceId": tid,
            "spanId": sid,
            "parentSpanId": parent,
            "name": name,
            "kind": 1,
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 1000),
            "attributes": attrs,
        }

    n, batch = 0, []
    with open(path, "w", encoding="utf-8") as f:
        for t in range(traces):
            tid, root = f"{t + 1:032x}", f"{4 * t + 1:016x}"
            start = T0_NS + t * 10_000
            batch += [
                span(tid, f"{4 * t + 2:016x}", root, "retrieve", "RETRIEVER", start + 1),
                span(tid, f"{4 * t + 3:016x}", root, "search", "TOOL", start + 2),
                span(tid, f"{4 * t + 4:016x}", root, "ChatOpenAI", "LLM", start + 3),
                span(tid, root, "", "rag", "CHAIN", start),
            ]
            n += 4
            if len(batch) >= 20:
                f.write(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": batch}]}]}) + "\n")
                batch = []
        if batch:
            f.write(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": batch}]}]}) + "\n")
    return n


def test_a_file_of_100000_spans_is_read_one_page_at_a_time(tmp_path):
    src = tmp_path / "big.jsonl"
    total = _synthetic_file(src, 25_000)
    assert total == 100_000
    source = OtlpFiles([src], page_size=200)
    summary = run(source, Filters(), output=tmp_path / "out.jsonl")
    assert source.stats["lines"] == total // 20  # every line read
    assert summary.spans == 25_000 and summary.skipped == Counter({"no response text": 25_000})
    # one page at a time: never more spans held than a page plus one line's worth of waiting spans
    assert source.stats["max_rows"] <= 200 + 20, source.stats
    assert summary.pages >= total // 220, summary.pages
    assert source.stats["cut_traces"] == 0  # every trace waited for its root


# ---------------------------------------------------------------- Langfuse (the real SDK, a loopback server)


class LangfuseStore(LangfuseServer):
    """Langfuse's API as far as ``groundlens traces langfuse`` goes: the observations API
    (``GET /api/public/v2/observations``, cursor pages, filters by type, name, trace and start
    time) over a fixed list, and scores upserted by id as Langfuse keeps them."""

    def __init__(self, observations: list[dict]) -> None:
        super().__init__()
        self.observations = observations
        self.by_id: dict[str, dict] = {}
        self.pages_served = 0
        self.default = self._answer_store

    def _answer_store(self, request: Request) -> Reply:
        path, _, query = request.path.partition("?")
        if request.method == "GET" and path == "/api/public/v2/observations":
            if not request.headers.get("authorization", "").startswith("Basic "):
                return Reply.json({"message": "unauthorized"}, status=401)
            q = dict(urllib.parse.parse_qsl(query))
            rows = [
                o
                for o in self.observations
                if all(o.get(k) == q[k] for k in ("type", "name", "traceId") if k in q)
                and ("fromStartTime" not in q or o["startTime"] >= q["fromStartTime"])
                and ("toStartTime" not in q or o["startTime"] < q["toStartTime"])
            ]
            start, limit = int(q.get("cursor", 0)), int(q.get("limit", 50))
            page = rows[start : start + limit]
            self.pages_served += 1
            meta = {"cursor": str(start + limit)} if start + limit < len(rows) else {}
            return Reply.json({"data": page, "meta": meta})
        reply = self._answer(request)
        if reply.status == 202:
            for score in request.json:
                self.by_id[score["id"]] = score
        return reply


def _observations(runs: list[str]) -> tuple[list[dict], list[str]]:
    obs, gens = [], []
    for i, answer in enumerate(runs):
        tid = uuid.uuid4().hex
        at = f"2025-06-01T12:00:{i:02d}"
        root, retr, gen = (uuid.uuid4().hex[:16] for _ in range(3))
        base = {"traceId": tid, "projectId": "p", "environment": "default"}
        obs += [
            {
                **base,
                "id": root,
                "type": "CHAIN",
                "name": "rag",
                "startTime": f"{at}.000Z",
                "endTime": f"{at}.900Z",
                "input": json.dumps({"question": QUESTION_SGI}),
                "output": json.dumps(answer),
            },
            {
                **base,
                "id": retr,
                "type": "RETRIEVER",
                "name": "retrieve",
                "parentObservationId": root,
                "startTime": f"{at}.100Z",
                "endTime": f"{at}.200Z",
                "input": json.dumps(QUESTION_SGI),
                "output": json.dumps([{"page_content": CONTEXT_SGI, "metadata": {"id": 1}}]),
            },
            {
                **base,
                "id": gen,
                "type": "GENERATION",
                "name": "ChatOpenAI",
                "parentObservationId": root,
                "startTime": f"{at}.300Z",
                "endTime": f"{at}.800Z",
                "model": "gpt-test",
                "input": json.dumps(
                    [
                        {"role": "system", "content": "You are a helpful assistant."},
                        {"role": "user", "content": QUESTION_SGI},
                    ]
                ),
                "output": json.dumps({"role": "assistant", "content": answer}),
                "usageDetails": {"input": 42, "output": 7, "total": 49},
            },
        ]
        gens.append(gen)
    return obs, gens


def test_langfuse_generations_get_one_score_each_and_a_rerun_updates_the_same_scores(tmp_path, capsys, monkeypatch):
    obs, gens = _observations([GROUNDED, OFF_TOPIC, GROUNDED])
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", f"pk-lf-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-test")
    with LangfuseStore(obs) as server:
        args = ["langfuse", "--url", server.url, "--page-size", "2", "-o", str(tmp_path / "out.jsonl")]
        code, first = _traces(tmp_path, *args, capsys=capsys)
        assert code == 0, first
        assert first["writers"]["Langfuse"]["sent"] == 3 and first["pages"] == 2
        scores = {s["observationId"]: s for s in server.by_id.values()}
        assert set(scores) == set(gens)
        by_gen = {g: scores[g] for g in gens}
        live = _live_scores([(QUESTION_SGI, CONTEXT_SGI, a) for a in (GROUNDED, OFF_TOPIC, GROUNDED)])
        assert [(by_gen[g]["value"], by_gen[g]["metadata"]["label"]) for g in gens] == live
        assert by_gen[gens[1]]["value"] < by_gen[gens[0]]["value"]
        assert {s["traceId"] for s in scores.values()} == {o["traceId"] for o in obs}
        assert all(s["name"] == "groundlens" and s["dataType"] == "NUMERIC" for s in scores.values())
        lines = _lines(tmp_path / "out.jsonl")
        assert lines[0]["step"]["context"] == [{"source": "retriever", "text": CONTEXT_SGI}]
        assert lines[0]["step"]["question"] == QUESTION_SGI

        ids_first = sorted(s["id"] for s in server.scores)
        code, again = _traces(tmp_path, *args, capsys=capsys)
        assert code == 0 and again["writers"]["Langfuse"]["sent"] == 3
        assert len(server.scores) == 6  # sent twice ...
        assert sorted(s["id"] for s in server.scores[3:]) == ids_first  # ... under the same ids: updates
        assert len(server.by_id) == 3


def test_langfuse_resumes_from_its_state_and_scores_only_new_observations(tmp_path, capsys, monkeypatch):
    obs, gens = _observations([GROUNDED, GROUNDED])
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", f"pk-lf-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-test")
    state = tmp_path / "state.json"
    with LangfuseStore(obs) as server:
        args = ["langfuse", "--url", server.url, "--state", str(state), "--until", "2025-06-01T13:00:00Z"]
        _, first = _traces(tmp_path, *args[:-2], "--until", "2025-06-01T12:30:00Z", capsys=capsys)
        assert first["writers"]["Langfuse"]["sent"] == 2
        assert json.loads(state.read_text())["position"]["done_until"] is not None
        later, later_gens = _observations([GROUNDED])
        for o in later:  # stored after the first run's window
            o["startTime"] = o["startTime"].replace("12:00", "12:40")
            o["endTime"] = o["endTime"].replace("12:00", "12:40")
        server.observations += later
        _, second = _traces(tmp_path, *args, capsys=capsys)
        assert second["spans"] == 1 and second["writers"]["Langfuse"]["sent"] == 1
        assert server.scores[-1]["observationId"] == later_gens[0]


def test_a_backend_that_fails_stops_the_run_with_its_pages_kept(tmp_path, capsys, monkeypatch):
    obs, _ = _observations([GROUNDED, GROUNDED, GROUNDED])
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", f"pk-lf-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-test")
    state = tmp_path / "state.json"
    with LangfuseStore(obs) as server:
        fail_after = {"n": 0}
        serve = server.default

        def flaky(request: Request) -> Reply:
            if request.method == "GET" and "cursor=" in request.path and "traceId" not in request.path:
                fail_after["n"] += 1
                return Reply.json({"message": "overloaded"}, status=503)
            return serve(request)

        server.default = flaky
        args = ["langfuse", "--url", server.url, "--page-size", "2", "--state", str(state)]
        code, summary = _traces(tmp_path, *args, capsys=capsys)
        assert code == 1 and "503" in summary["stopped"]
        assert summary["writers"]["Langfuse"]["sent"] == 2  # the first page was scored and written
        assert "cursor" in json.loads(state.read_text())["position"]  # a rerun continues with page 2
        server.default = serve
        code, rest = _traces(tmp_path, *args, capsys=capsys)
        assert code == 0 and rest["writers"]["Langfuse"]["sent"] == 1
        assert len(server.by_id) == 3
