"""Edges of the runtime: cost that grows with the input, sinks whose backend never answers, offline
checks, exports with long texts, duplicate step ids, terminal escapes, a full disk."""

from __future__ import annotations

import sys

import pytest

from groundlens_core.evidence.factcheck import check_facts, context_facts
from groundlens_core.evidence.passages import plan_evidence

# ---------------------------------------------------------------- fact checking grows linearly

_FORMS = {
    "distinct prices": lambda i, s: f"Item {i} costs {i * 7 + 3 + s} dollars.",
    "one price": lambda i, s: f"Item {i} costs {5 + s} dollars.",
    "bounds": lambda i, s: f"Item {i} costs more than {i * 7 + 3 + s} dollars.",
    "polarity": lambda i, s: f"The room {i} is {'open' if (i + s) % 2 else 'closed'} on Mondays.",
}


def _calls_to_check(form, n: int) -> int:
    """Python and builtin calls made while checking n response sentences against n context sentences."""
    context = " ".join(form(i, 0) for i in range(n))
    response = " ".join(form(i, 1) for i in range(n))
    plan = plan_evidence(response, context)
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        check_facts(plan.response_spans, context_facts(context, plan.context_spans))
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("form", list(_FORMS))
def test_fact_checking_work_grows_linearly_with_the_sentences(form):
    small, large = _calls_to_check(_FORMS[form], 100), _calls_to_check(_FORMS[form], 400)
    # four times the sentences: about four times the calls (every pair compared would be sixteen)
    assert large <= 4.6 * small, (small, large)


def test_a_contradicted_fact_names_a_few_of_many_values_the_source_gives():
    context = " ".join(f"Item {i} costs {i * 7 + 3} dollars." for i in range(300))
    plan = plan_evidence("Item 5 costs 39 dollars.", context)
    (found,) = [f for f in check_facts(plan.response_spans, context_facts(context, plan.context_spans))
                if f.kind.startswith("money")]  # fmt: skip
    assert found.status == "contradicted" and found.source.endswith("\u2026")
    assert found.source.count(";") <= 7


# ---------------------------------------------------------------- terminal escapes are no facts


def test_numbers_inside_terminal_escape_sequences_are_not_facts_and_offsets_stay_true():
    response = "\x1b]0;X\x07\x1b[2J In 1999. \x1b]2;12 days\x1b\\It costs 5 dollars\x07."
    context = "In 1999 the shop opened. It costs 5 dollars."
    plan = plan_evidence(response, context)
    found = [f for f in check_facts(plan.response_spans, context_facts(context, plan.context_spans))]
    assert [(f.text, f.status) for f in found] == [("1999", "supported"), ("5 dollars", "supported")]
    assert all(response[f.start : f.end] == f.text for f in found)


def test_a_number_inside_an_escape_in_the_context_is_no_support():
    plan = plan_evidence("You get 2 attempts.", "\x1b[2J You may try again.")
    found = check_facts(plan.response_spans, context_facts(plan.context, plan.context_spans))
    assert [(f.text, f.status) for f in found if f.kind == "count"] == [("2", "unsupported")]


# ---------------------------------------------------------------- a full disk leaves no temporary


def test_a_graph_cache_write_that_fails_on_a_full_disk_leaves_no_temporary(tmp_path, monkeypatch):
    import errno
    import io

    from groundlens_core.embedding import onnx_backend

    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    cache = tmp_path / "cache"
    monkeypatch.setenv("GROUNDLENS_CACHE_DIR", str(cache))
    monkeypatch.setattr(onnx_backend, "_build", lambda model_dir, precision: b"graph" * 1000)

    class FullDisk(io.FileIO):
        def write(self, data):
            super().write(bytes(data)[:100])  # part of it lands, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")

    real_fdopen = onnx_backend.os.fdopen
    monkeypatch.setattr(onnx_backend.os, "fdopen", lambda fd, mode="r", *a, **k: FullDisk(fd, "wb")
                        if "w" in mode else real_fdopen(fd, mode, *a, **k))  # fmt: skip
    for _ in range(3):
        data, path, stamp = onnx_backend._graph_file(model, "fp32")
        assert data == b"graph" * 1000 and path is None and stamp is None  # built in memory instead
    assert [p.name for p in cache.rglob("*") if p.is_file()] == []


# ---------------------------------------------------------------- cut exports cut every text


def _strings(value, key=None):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v, key)
    elif isinstance(value, str):
        yield key, value


def test_max_text_chars_cuts_every_text_of_a_step_and_its_score(dgi_calibration):
    import json

    from groundlens_core.trace import CallRecord, ContextPiece, Recorder

    words = " ".join(f"the harbour office records vessel number {i} with its cargo and its crew" for i in range(60))
    context = f"The harbour opened in 1852 and {words}."
    response = f"The harbour opened in 1853 and {words}, the logbook says."
    rec = Recorder("test", calibration=dgi_calibration)
    rec.record(CallRecord("k", "answer", question="When did the harbour open?", response=response,
                          context=[ContextPiece(context, "retriever")]))  # fmt: skip
    rec.flush()
    trace = rec.get_trace("k")
    assert trace.steps[0].result is not None and trace.steps[0].result.evidence is not None
    full = trace.to_json()
    assert any(len(v) > 1000 for k, v in _strings(json.loads(full)) if k in ("text", "passage", "explanation"))
    cut = json.loads(trace.to_json(max_text_chars=100))
    step = cut["steps"][0]
    too_long = [(k, len(v)) for k, v in _strings(step) if len(v) > 100 and k != "fingerprint"]  # an id, no text
    assert too_long == []
    assert step["response"]["truncated"] and step["response"]["length"] == len(response)
