"""Send a groundlens trace to an OpenTelemetry backend (Arize Phoenix, Jaeger, an OTel Collector...).

By default runs the same LangGraph support desk as ``examples/langgraph_rag.py`` (``make demo``)
with the callback's live exporter: spans leave as each step is scored. ``--recorder`` instead
records a small run through a :class:`Recorder` directly (no framework needed), exported live
(``--live``) or post-hoc; ``--load`` ships a saved trace, such as ``out/trace.json``.

    pip install "groundlens-core[otel,langgraph]"
    phoenix serve                       # or any OTLP/HTTP endpoint
    python examples/otel_export.py --endpoint http://127.0.0.1:6006 --project demo
    python examples/otel_export.py --load out/trace.json    # the demo's saved run, post-hoc
    python examples/otel_export.py --recorder --endpoint http://127.0.0.1:6006
    python examples/otel_export.py --live --save trace.json
    python examples/otel_export.py --load trace.json           # ship a saved trace again

Without ``--endpoint`` the OTLP exporter reads ``OTEL_EXPORTER_OTLP_ENDPOINT``. A backend that is
down costs one warning; the trace stays in memory and in ``--save``'s JSON.

The scores are triage signals that rank which outputs a human should review first, not verdicts
of truth.
"""

from __future__ import annotations

import argparse
import logging
import time

from groundlens_core.trace import CallRecord, ContextPiece, Recorder, Trace, Usage
from groundlens_core.trace.otel import OTelExporter, configure_otlp, export_failures, export_trace


def ship(trace: Trace, endpoint: str | None = None, *, project: str = "groundlens", redact: bool = False,
         max_text_chars: int | None = None) -> tuple[str, int]:
    """Export one finished or saved trace over OTLP/HTTP and wait until it has left.

    ``endpoint``: the backend's base URL (``http://127.0.0.1:6006``), or None for
    ``OTEL_EXPORTER_OTLP_ENDPOINT``. Returns the OpenTelemetry trace id (hex), to look the trace
    up in the backend, and how many spans the backend did not accept (0: all arrived). Never
    raises because the backend is down: that is one logged warning.
    """
    provider = configure_otlp(endpoint, project=project)
    try:
        trace_id = export_trace(trace, provider, redact=redact, max_text_chars=max_text_chars)
    finally:
        provider.shutdown()
    return trace_id, export_failures(provider)


def report_shipped(what: str, trace_id: str, failed: int) -> int:
    """Say whether the export arrived; the exit code (1 when spans were lost)."""
    if failed:
        print(f"could not ship {what}: the backend accepted none of {failed} span(s) (see the warning above); "
              "the trace itself is unchanged and can be shipped again")
        return 1
    print(f"shipped {what}: OTel trace id {trace_id}")
    return 0


def _lost(provider: object) -> str:
    failed = export_failures(provider)
    return f", but the backend accepted none of {failed} span(s); the trace is kept (--save)" if failed else ""


def record_demo_run(recorder: Recorder, key: str = "demo-run") -> Trace:
    """What a plugin would record for a tiny retrieve-then-answer agent."""
    doc = ("The Eiffel Tower, completed in 1889 for the World Fair, is 330 metres tall and was designed by the "
           "engineering company of Gustave Eiffel. It stands on the Champ de Mars in Paris.")
    question = "How tall is the Eiffel Tower and when was it built?"
    t = time.time()
    recorder.start_trace(key, name="eiffel-qa", metadata={"example": "otel_export"})
    recorder.record(CallRecord(key, "retrieve", kind="retrieval", context=[ContextPiece(doc, "retriever")],
                               started_at=t, ended_at=t + 0.05))
    recorder.record(CallRecord(key, "answer", question=question, context=[ContextPiece(doc, "retriever")],
                               response="It is 330 metres tall and was completed in 1889 for the World Fair.",
                               model="gpt-4o-mini",
                               provider="openai", usage=Usage(64, 12, 76), started_at=t + 0.06, ended_at=t + 0.9))
    recorder.record(CallRecord(key, "drift", question=question, context=[ContextPiece(doc, "retriever")],
                               response="I am not sure, but big towers are usually built in the twentieth century.",
                               model="gpt-4o-mini", provider="openai", started_at=t + 1.0, ended_at=t + 1.6))
    recorder.record(CallRecord(key, "smalltalk", question="Say something nice about Paris.",
                               response="Paris is lovely in the spring, with long walks along the Seine.",
                               model="gpt-4o-mini", provider="openai", started_at=t + 1.7, ended_at=t + 2.2))
    recorder.end_trace(key)
    recorder.flush()
    return recorder.get_trace(key)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", default=None, help="OTLP/HTTP base URL (default: $OTEL_EXPORTER_OTLP_ENDPOINT)")
    ap.add_argument("--project", default="groundlens", help="Phoenix project (openinference.project.name)")
    ap.add_argument("--recorder", action="store_true", help="record a small run with a Recorder instead of the LangGraph desk")
    ap.add_argument("--live", action="store_true", help="with --recorder: export as steps are scored, not after the run")
    ap.add_argument("--redact", action="store_true", help="send keyed-digest+length markers instead of texts")
    ap.add_argument("--save", default=None, help="also write the trace JSON here")
    ap.add_argument("--load", default=None, help="ship this saved trace JSON instead of recording a run")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    if args.load:
        trace = Trace.load(args.load)
        return report_shipped(args.load, *ship(trace, args.endpoint, project=args.project, redact=args.redact))

    if not args.recorder:
        import sys
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from langgraph_rag import run_support_desk

        from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback

        provider = configure_otlp(args.endpoint, project=args.project)
        _, trace = run_support_desk(GroundlensLangGraphCallback(name="support-desk-rag", tracer_provider=provider))
        provider.shutdown()  # flushes the spans still queued
        print(f"live-exported the LangGraph run {trace.id}{_lost(provider)}")
    elif args.live:
        provider = configure_otlp(args.endpoint, project=args.project)
        recorder = Recorder("example", listeners=[OTelExporter(provider, redact=args.redact)])
        trace = record_demo_run(recorder)
        provider.shutdown()  # flushes the spans still queued
        print(f"live-exported trace {trace.id}{_lost(provider)}")
    else:
        trace = record_demo_run(Recorder("example"))
        code = report_shipped(f"trace {trace.id}", *ship(trace, args.endpoint, project=args.project, redact=args.redact))
        if code:
            return code
    print(trace.summary(riskiest_first=True))
    print("(scores rank outputs for human review; they are not verdicts of truth)")
    if args.save:
        trace.save(args.save, redact=args.redact)
        print(f"saved {args.save}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
