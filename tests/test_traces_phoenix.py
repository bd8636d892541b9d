"""``groundlens traces phoenix`` against a real Arize Phoenix server: the spans an application
shipped are read back, scored, and annotated in Phoenix; a rerun leaves one annotation per span.

Phoenix runs from its own venv (``make phoenix``). Without it the tests skip, except under
CI=true, where they fail: CI must run them.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from demo_trace import GROUNDED, OFF_TOPIC
from phoenix_server import running_phoenix
from stored_traces import T0_NS, rag_run

from groundlens_core.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def phoenix():
    with running_phoenix() as server:
        yield server


def ship_runs(phoenix, project: str, answers: list[str]) -> list[tuple[str, str]]:
    """Send one RAG run per answer to Phoenix over OTLP/HTTP, as an instrumented application
    would; wait until Phoenix stored every span. Returns the LLM spans' (trace id, span id)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces", timeout=60)))
    tracer = provider.get_tracer("the-app")
    ids = [rag_run(tracer, a, at_ns=T0_NS + i * 1_000_000_000) for i, a in enumerate(answers)]
    provider.shutdown()
    spans = phoenix.wait_for_spans(project, 3 * len(answers))
    assert len(spans) == 3 * len(answers)
    return ids


def annotations(client, project: str, span_ids: list[str]) -> list[dict]:
    return [
        a
        for a in client.spans.get_span_annotations(span_ids=span_ids, project_identifier=project)
        if a["name"] == "groundlens"
    ]


def traces(capsys, *args: str) -> tuple[int, dict]:
    code = main(["traces", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_stored_spans_are_annotated_once_and_a_rerun_adds_no_annotation(phoenix, capsys, tmp_path):
    from phoenix.client import Client

    project = f"groundlens-traces-{uuid.uuid4().hex[:8]}"
    ids = ship_runs(phoenix, project, [GROUNDED, OFF_TOPIC, GROUNDED])
    span_ids = [s for _, s in ids]
    client = Client(base_url=phoenix.url)
    out = tmp_path / "out.jsonl"
    args = ["phoenix", "--project", project, "--url", phoenix.url, "--page-size", "1", "-o", str(out)]

    code, first = traces(capsys, *args)
    assert code == 0, first
    assert first["spans"] == 3 and first["writers"]["Phoenix"] == {"sent": 3, "failed": 0, "skipped": 0, "reasons": {}}
    assert first["pages"] == 3  # one LLM span a page: never the whole project at once
    assert first["max_rows"] <= 1 + 3  # a page's span and the spans of its trace
    lines = {r["span_id"]: r for r in (json.loads(x) for x in out.read_text().splitlines())}
    assert set(lines) == set(span_ids)

    found = annotations(client, project, span_ids)
    assert sorted(a["span_id"] for a in found) == sorted(span_ids)  # one each
    for a in found:
        line = lines[a["span_id"]]
        assert a["annotator_kind"] == "CODE"
        assert a["result"]["label"] == line["band"]
        assert a["result"]["score"] == pytest.approx(line["score"])
        assert a["result"]["explanation"] == line["explanation"]
        assert a["identifier"] == line["id"]
        assert line["step"]["context"][0]["source"] == "retriever"
    by_span = {a["span_id"]: a for a in found}
    assert by_span[span_ids[1]]["result"]["score"] < by_span[span_ids[0]]["result"]["score"]
    ids_before = sorted(a["id"] for a in found)

    code, again = traces(capsys, *args)  # no state: everything scored again, and updated in place
    assert code == 0 and again["writers"]["Phoenix"]["sent"] == 3
    found = annotations(client, project, span_ids)
    assert len(found) == 3
    assert sorted(a["id"] for a in found) == ids_before  # the same annotations, updated, none added


def test_a_state_file_scores_only_spans_stored_since_the_last_run(phoenix, capsys, tmp_path):
    from phoenix.client import Client

    project = f"groundlens-resume-{uuid.uuid4().hex[:8]}"
    ids = ship_runs(phoenix, project, [GROUNDED, GROUNDED])
    state = tmp_path / "state.json"
    args = ["phoenix", "--project", project, "--url", phoenix.url, "--state", str(state), "--sample", "1"]
    code, first = traces(capsys, *args)
    assert code == 0 and first["spans"] == 2
    assert json.loads(state.read_text())["last_span"]["span_id"] in {s for _, s in ids}
    code, again = traces(capsys, *args)
    assert code == 0 and again["spans"] == 0 and again["writers"]["Phoenix"]["sent"] == 0

    later = ship_runs_more(phoenix, project, 2)
    code, third = traces(capsys, *args)
    assert code == 0 and third["spans"] == 1 and third["writers"]["Phoenix"]["sent"] == 1
    client = Client(base_url=phoenix.url)
    assert [a["span_id"] for a in annotations(client, project, [later])] == [later]


def ship_runs_more(phoenix, project: str, already: int) -> str:
    """One more run into ``project`` (which holds ``already`` runs); returns its LLM span id."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces", timeout=60)))
    _, span_id = rag_run(provider.get_tracer("the-app"), GROUNDED, at_ns=T0_NS + 60 * 1_000_000_000)
    provider.shutdown()
    deadline = time.monotonic() + 180
    while len(phoenix.spans(project)) < 3 * (already + 1) and time.monotonic() < deadline:
        time.sleep(0.5)
    return span_id
