"""Where each context piece came from, kept as data: a piece's ``producer`` (the step whose result
it is) through the normaliser, the recorder, the JSON and the report, and each evidence sentence's
``passage_piece`` (the piece its best passage lies in) through the core. Scored with the real
embedding model; the adapters' side is in test_context_origin_crewai.py."""

from __future__ import annotations

import json

import jsonschema
import pytest

from groundlens_core import evaluate
from groundlens_core.scoring import join_context, join_context_pieces
from groundlens_core.scoring.results import as_score
from groundlens_core.trace import CallRecord, ContextPiece, Recorder, Step, Trace
from groundlens_core.trace.html import render_html
from groundlens_core.trace.model import json_schema
from groundlens_core.trace.recorder.inputs import context_from, tool_message_pieces

QUESTION = "How tall is the Eiffel Tower, and when was it completed?"
EIFFEL = "The Eiffel Tower in Paris is 330 metres tall, including its antennas."
OPENED = "The tower was completed in 1889 for the World's Fair."
LOUVRE = "The Louvre in Paris is the world's most-visited museum; it opened in 1793."
ANSWER = "The Eiffel Tower is 330 metres tall. It was completed in 1889."


def _data(doc: str) -> dict:
    """The JSON the report's script reads."""
    start = doc.index('id="gl-data"')
    body = doc[doc.index(">", start) + 1 : doc.index("</script>", start)]
    return json.loads(body)


def _entry(doc: str, step_id: str) -> tuple[int, dict]:
    """A step's place in the report's rows and its details."""
    data = _data(doc)
    pos = next(i for i, r in enumerate(data["rows"]) if r["id"] == step_id)
    return pos, data["steps"][pos]


# ---------------------------------------------------------------- the piece's producer as data


def _trace(*steps: Step) -> Trace:
    return Trace(id="t", name="origin", framework="test", started_at="2025-01-01T00:00:00Z", steps=list(steps))


def test_producer_round_trips_through_json_and_only_when_set():
    tool = Step(id="tool-1", index=0, node="search", kind="tool", method="skipped", response=EIFFEL)
    pieces = (ContextPiece(EIFFEL, "tool:search", producer="tool-1"), ContextPiece(LOUVRE, "state:notes"))
    answer = Step(id="llm-1", index=1, node="answer", kind="llm", method="skipped", context=pieces)
    data = json.loads(_trace(tool, answer).to_json())
    jsonschema.validate(data, json_schema())
    assert data["steps"][1]["context"] == [
        {"source": "tool:search", "text": EIFFEL, "producer": "tool-1"},
        {"source": "state:notes", "text": LOUVRE},  # unknown: no key, as files wrote before
    ]
    back = Trace.from_json(json.dumps(data))
    assert back.steps[1].context == answer.context
    # an id is no text of the caller's: redacted and cut views keep it
    for view in (dict(redact=True), dict(max_text_chars=10)):
        shown = json.loads(_trace(tool, answer).to_json(**view))
        jsonschema.validate(shown, json_schema())
        assert shown["steps"][1]["context"][0]["producer"] == "tool-1"


def test_a_file_without_producers_loads_and_writes_back_unchanged():
    old = json.loads(_trace(Step(id="a", index=0, node="n", kind="llm", method="skipped")).to_json())
    old["schema_version"] = "1.0"
    old["steps"][0]["context"] = [{"source": "retriever", "text": EIFFEL}]
    t = Trace.from_dict(old)
    assert t.steps[0].context == (ContextPiece(EIFFEL, "retriever"),) and t.steps[0].context[0].producer is None
    assert json.loads(t.to_json())["steps"][0]["context"] == [{"source": "retriever", "text": EIFFEL}]
    with pytest.raises(ValueError, match="producer must be text"):
        Trace.from_dict(
            {**old, "steps": [{**old["steps"][0], "context": [{"source": "x", "text": "y", "producer": 7}]}]}
        )


def test_normaliser_keeps_a_producer_and_takes_one_from_a_dropped_repeat():
    from_state = ContextPiece(EIFFEL, "state:context")
    from_tool = ContextPiece(f"  {EIFFEL}\n", "tool:search", producer="tool-1")
    other = ContextPiece(LOUVRE, "retriever", producer="ret-1")
    out = context_from([from_state, "   ", other], [from_tool, ContextPiece(LOUVRE, "tool:x", producer="tool-9")])
    # the first place a text was found names it; the step that made it is the one that knew
    assert out == [ContextPiece(EIFFEL, "state:context", producer="tool-1"), other]


def test_tool_messages_name_their_tool_step_when_the_adapter_maps_the_call_id():
    messages = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call-1", "name": "search"}]},
        {"role": "tool", "tool_call_id": "call-1", "name": "search", "content": EIFFEL},
        {"role": "tool", "tool_call_id": "call-2", "name": "search", "content": OPENED},
    ]
    assert [p.producer for p in tool_message_pieces(messages)] == [None, None]  # nothing guessed
    steps = {"call-1": "tool-step-7"}
    assert [(p.source, p.producer) for p in tool_message_pieces(messages, steps.get)] == [
        ("tool:search", "tool-step-7"),
        ("tool:search", None),
    ]


def test_recorder_keeps_the_producer_an_adapter_set():
    rec = Recorder("test", name="origin")
    tool_id = rec.record(CallRecord("run", "search", kind="tool", question="eiffel height", response=EIFFEL))
    rec.record(
        CallRecord(
            "run",
            "answer",
            question=QUESTION,
            context=[ContextPiece(EIFFEL, "tool:search", producer=tool_id), (OPENED, "state:notes")],
            response=ANSWER,
        )
    )
    rec.end_trace("run")
    trace = rec.get_trace("run")
    answer = trace.steps[1]
    assert [(p.source, p.producer) for p in answer.context] == [("tool:search", tool_id), ("state:notes", None)]
    assert Trace.from_json(trace.to_json()).steps[1].context == answer.context


# ---------------------------------------------------------------- the passage's piece through the core


def test_join_context_pieces_gives_each_kept_pieces_span_in_the_joined_text():
    given = ["  first piece ", "", None, "\u200b", "second"]
    text, spans = join_context_pieces(given)
    assert text == join_context(given) == "first piece\n\nsecond"
    assert spans == ((0, 0, 11), (4, 13, 19))
    assert [text[a:b] for _, a, b in spans] == ["first piece", "second"]
    assert join_context_pieces("one text") == ("one text", None)
    assert join_context_pieces(["", None]) == (None, None)


def test_passage_piece_points_at_the_callers_piece_past_a_dropped_blank():
    pieces = [EIFFEL, "   ", LOUVRE, OPENED]
    res = evaluate(QUESTION, ANSWER, pieces)
    by_sentence = {s.text: s for s in res.evidence.sentences}
    height, built = by_sentence["The Eiffel Tower is 330 metres tall."], by_sentence["It was completed in 1889."]
    assert (height.passage_piece, built.passage_piece) == (0, 3)  # 3: the blank piece 1 still counts
    for s in res.evidence.sentences:
        assert s.passage in pieces[s.passage_piece]
    # kept by the score's JSON, a file read back, and redaction (an index is no text)
    data = json.loads(res.to_json())
    assert [s["passage_piece"] for s in data["evidence"]["sentences"]] == [0, 3]
    assert as_score(data, checked=True) == res
    from groundlens_core.scoring.results import redact_score_dict

    assert [s["passage_piece"] for s in redact_score_dict(data)["evidence"]["sentences"]] == [0, 3]


def test_a_context_given_as_one_text_has_no_passage_piece_and_the_same_json():
    joined = "\n\n".join([EIFFEL, LOUVRE, OPENED])
    res = evaluate(QUESTION, ANSWER, joined)
    assert all(s.passage_piece is None for s in res.evidence.sentences)
    assert "passage_piece" not in res.to_json()
    # a list scores the same: only the pieces are added
    listed = evaluate(QUESTION, ANSWER, [EIFFEL, LOUVRE, OPENED])
    assert listed.score == res.score and listed.value == res.value
    assert [s.passage for s in listed.evidence.sentences] == [s.passage for s in res.evidence.sentences]


def test_recorded_steps_passage_piece_indexes_the_steps_context():
    rec = Recorder("test", name="origin")
    rec.record(
        CallRecord(
            "run",
            "answer",
            question=QUESTION,
            # a blank and a repeated piece are dropped by the normaliser before the core sees them
            context=[(LOUVRE, "retriever"), ("  ", "retriever"), (EIFFEL, "tool:search"), (LOUVRE, "x"), (OPENED, "y")],
            response=ANSWER,
        )
    )
    rec.end_trace("run")
    (step,) = rec.get_trace("run").steps
    assert [p.source for p in step.context] == ["retriever", "tool:search", "y"]
    assert [s.passage_piece for s in step.result.evidence.sentences] == [1, 2]
    for s in step.result.evidence.sentences:
        assert s.passage in step.context[s.passage_piece].text


# ---------------------------------------------------------------- the report reads the producer


def test_report_links_a_piece_to_its_producer_even_when_the_text_was_reworded():
    rec = Recorder("test", name="origin")
    raw = '{"landmark": "eiffel", "height_m": 330, "includes": "antennas"}'
    tool_id = rec.record(CallRecord("run", "search", kind="tool", question="eiffel", response=raw))
    # the agent quotes the tool's result in its own words: no substring of it matches
    reworded = ContextPiece(EIFFEL, "tool:search", producer=tool_id)
    stray = ContextPiece(OPENED, "state:notes", producer="no-such-step")  # not in the trace: ignored
    answer_id = rec.record(CallRecord("run", "answer", question=QUESTION, context=[reworded, stray], response=ANSWER))
    rec.end_trace("run")
    trace = rec.get_trace("run")
    doc = render_html(trace)
    tool_pos, _ = _entry(doc, tool_id)
    _, details = _entry(doc, answer_id)
    assert [c[3] for c in details["ctx"]] == [tool_pos, None]
    # each evidence sentence names its passage's piece, whose entry carries the producer's row
    assert [e[7] for e in details["ev"]] == [0, 1]
    assert details["ctx"][details["ev"][0][7]][3] == tool_pos
    # the same link from the file, without the producer: the substring search finds nothing
    data = json.loads(trace.to_json())
    for piece in data["steps"][1]["context"]:
        piece.pop("producer", None)
    _, old = _entry(render_html(Trace.from_dict(data)), answer_id)
    assert [c[3] for c in old["ctx"]] == [None, None]


def test_report_still_matches_by_text_when_no_producer_is_known():
    tool = Step(id="tool-1", index=0, node="search", kind="tool", method="skipped", response=EIFFEL)
    answer = Step(
        id="llm-1", index=1, node="answer", kind="llm", method="skipped", context=(ContextPiece(EIFFEL, "tool:search"),)
    )
    doc = render_html(_trace(tool, answer))
    tool_pos, _ = _entry(doc, "tool-1")
    assert _entry(doc, "llm-1")[1]["ctx"][0][3] == tool_pos
