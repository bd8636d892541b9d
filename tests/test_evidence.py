"""Sentence-level evidence on the real model: splitter, content normalisation, support, the
no-question method, blank text, JSON round trip and batch invariance."""

from __future__ import annotations

import json

import numpy as np
import pytest

import groundlens_core as gl
from groundlens_core.evidence.content import content_tokens
from groundlens_core.evidence.sentences import split_sentences
from groundlens_core.scoring.bands import triage
from groundlens_core.scoring.results import Evidence, SupportResult, score_from_dict
from groundlens_core.text import is_blank

SOURCE = ("Poseidon (film) . Poseidon grossed $ 181,674,817 at the worldwide box office on a budget of $ 160 million . "
          "The film was directed by Wolfgang Petersen.")
SUMMARY = ("The film \"Poseidon\", directed by Wolfgang Petersen, grossed $181,674,817 worldwide. "
           "It won three Academy Awards in 2007.")


@pytest.fixture(scope="module")
def emb():
    return gl.get_embedder()


# ---------------------------------------------------------------- splitter


@pytest.mark.parametrize("text, expected", [
    ("Dr. Smith paid $1.5 million on Jan. 5, 2020. He left! Then J. K. Rowling wrote it.",
     ["Dr. Smith paid $1.5 million on Jan. 5, 2020.", "He left!", "Then J. K. Rowling wrote it."]),
    ("Summary:\n1. The film grossed $181,674,817.\n2. Budget was $160 million.\n- a bullet\n* another one",
     ["Summary:", "The film grossed $181,674,817.", "Budget was $160 million.", "a bullet", "another one"]),
    ("A hard-wrapped\nline of prose. The U.S. economy grew 3.2% in 2019. Next one.",
     ["A hard-wrapped\nline of prose.", "The U.S. economy grew 3.2% in 2019.", "Next one."]),
    ("He said \"Stop.\" Then he left...  What? Yes.", ["He said \"Stop.\"", "Then he left...", "What?", "Yes."]),
    ("Heading\nBody text starts here.\r\n\r\nNew paragraph", ["Heading", "Body text starts here.", "New paragraph"]),
    ("\u200b  \n ... \n", []),
])
def test_splitter_sentences_and_offsets(text, expected):
    spans = split_sentences(text)
    assert [s.text for s in spans] == expected
    for s in spans:
        assert text[s.start:s.end] == s.text


def test_content_normalisation():
    def keys(t):
        return [c.key for c in content_tokens(t)]

    assert keys("$181,674,817") == keys("181,674,817") == keys("$ 181674817")
    assert keys("3.50%") == keys("3.5") and keys("three") == keys("3")
    assert keys("Grossed films") == keys("gross film")
    assert keys("The passage describes it.") == []  # stop words and words about the text are not content
    kinds = {c.text: c.kind for c in content_tokens("In March 2020 the Board met Alice and paid $5.")}
    assert kinds == {"March": "date", "2020": "date", "Board": "name", "met": "word", "Alice": "name", "paid": "word", "$5": "number"}


# ---------------------------------------------------------------- evidence and support


def test_summary_without_question_names_the_weakest_sentence(emb):
    res = gl.evaluate(response=SUMMARY, context=SOURCE)
    assert isinstance(res, SupportResult) and res.method == "support"
    ev = res.evidence
    assert [s.text for s in ev.sentences] == [s.text for s in split_sentences(SUMMARY)]
    assert len(ev.sentences) == 2
    first, second = ev.sentences
    assert first.unsupported == ()  # formatting of the amount and the name order are not new content
    assert {u.text for u in second.unsupported} == {"won", "three", "Academy", "Awards", "2007"}
    assert ev.weakest == 1 and ev.weakest_sentence is second
    assert res.value == ev.support == pytest.approx(1 - 5 / ev.content_tokens)
    assert res.triage == triage("support", res.value) == "flagged" and res.flagged
    assert 'Weakest sentence: "It won three Academy Awards in 2007."' in res.explanation
    for s in ev.sentences:  # offsets index the response and the context
        assert SUMMARY[s.start:s.end] == s.text and SOURCE[s.passage_start:s.passage_end] == s.passage
        for u in s.unsupported:
            assert SUMMARY[u.start:u.end] == u.text
    # the best passage is the most similar context sentence, each sentence pooled from the pass of
    # its whole text (the response's, the context's)
    ctx_spans = [(p.start, p.end) for p in split_sentences(SOURCE)]
    _, (resp_rows, ctx_rows) = emb.encode_spans([SUMMARY, SOURCE], [[(first.start, first.end)], ctx_spans])
    sims = ctx_rows.astype(np.float64) @ resp_rows[0].astype(np.float64)
    assert first.similarity == pytest.approx(float(sims.max()), abs=1e-12)
    assert first.passage == split_sentences(SOURCE)[int(np.argmax(sims))].text


def test_supported_summary_passes_and_blank_question_is_no_question():
    good = "Poseidon grossed $181,674,817 worldwide on a $160 million budget."
    for q in (None, "", "  ", "\u200b\u200b"):
        res = gl.evaluate(q, good, SOURCE)
        assert res.method == "support" and res.value == 1.0 and res.triage == "trusted"
        assert res.evidence.weakest is None


def test_sgi_with_evidence_bands_on_facts_and_shows_the_ranked_score():
    from groundlens_core.scoring.decision import band_of_score

    q = "How much did Poseidon gross?"
    wrong = "Poseidon grossed $95 million and won an Oscar."
    res = gl.evaluate(q, wrong, SOURCE)
    plain = gl.evaluate(q, wrong, SOURCE, evidence=False)
    assert res.method == plain.method == "sgi" and res.value == plain.value  # SGI itself is unchanged
    assert plain.evidence is None and plain.support is None and plain.normalized == res.normalized
    assert band_of_score(plain.score) == plain.triage == triage("sgi", plain.value)  # without evidence: SGI's bands
    failed = [f.describe() for f in res.evidence.failed_facts()]
    assert any(d.startswith("$95 million \u2014 the source says $") and "181,674,817" in d for d in failed)
    assert res.triage == "flagged" and res.score < 1 / 3  # a wrong amount flags, whatever SGI says
    assert res.explanation.startswith(f"Score {res.score:.2f}, flagged: ")  # the first clause is the ranked score
    assert "$95 million" in res.explanation.split(".")[0] + res.explanation
    paraphrase = gl.evaluate(q, "Poseidon earned $181,674,817 at the worldwide box office.", SOURCE)
    assert all(not f.failed for f in paraphrase.evidence.facts) and paraphrase.triage != "flagged"
    assert paraphrase.score > res.score and band_of_score(paraphrase.score) == paraphrase.triage
    assert "SGI" in res.explanation and "Support" in res.explanation


def test_json_round_trip_and_batch_invariance():
    items = [
        {"response": SUMMARY, "context": SOURCE},
        {"question": "How much did Poseidon gross?", "response": "It grossed $181,674,817.", "context": SOURCE},
        {"question": "Who directed it?", "response": "Wolfgang Petersen."},
    ]
    batch = gl.evaluate_batch(items)
    assert [r.method for r in batch] == ["support", "sgi", "dgi"]
    rev = gl.evaluate_batch(list(reversed(items)))
    for i, it in enumerate(items):
        alone = gl.evaluate(it.get("question"), it["response"], it.get("context"))
        assert alone.to_json() == batch[i].to_json() == rev[len(items) - 1 - i].to_json()
        back = score_from_dict(json.loads(batch[i].to_json()))
        assert back == batch[i] and back.to_json() == batch[i].to_json()
    assert isinstance(score_from_dict(json.loads(batch[0].to_json())).evidence, Evidence)


# ---------------------------------------------------------------- blank text


@pytest.mark.parametrize("text, blank", [
    ("", True), ("  \t\n", True), ("\u200b\u200c\u2060\ufeff", True), ("...?!", True), ("\u00ad\ufe0f", True),
    ("\U0001f642", False), ("5", False), ("a", False), ("\u200ba", False),
])
def test_one_notion_of_blank(text, blank):
    assert is_blank(text) is blank


def test_blank_text_is_the_same_error_everywhere():
    zw = "\u200b\u200b\u200b"
    with pytest.raises(gl.GroundlensInputError, match="^question is blank$"):
        gl.evaluate(zw, "Paris.")  # no context: DGI needs a real question
    with pytest.raises(gl.GroundlensInputError, match="^response is blank$"):
        gl.evaluate("Where?", zw, "Some context.")
    with pytest.raises(gl.GroundlensInputError, match="^response is blank$"):
        gl.evaluate(response="...", context="Some context.")
    res = gl.evaluate_batch([{"question": zw, "response": "x"}, {"question": "q?", "response": zw, "context": "c"}])
    assert [r.error for r in res] == ["question is blank", "response is blank"]


def test_explanations_do_not_claim_a_restatement_they_cannot_see():
    # emoji alone embed to one point: they are not scored at all (a one-line error), never "restated"
    with pytest.raises(gl.GroundlensInputError, match="no letter or digit"):
        gl.evaluate("\U0001f642\U0001f642\U0001f642", "\U0001f4a3\U0001f4a3\U0001f4a3\U0001f4a3")


# ---------------------------------------------------------------- the recorder decides the method


def test_recorder_scores_a_call_without_question_against_its_context_and_redacts_evidence():
    import jsonschema

    from groundlens_core.trace import CallRecord, Recorder
    from groundlens_core.trace.model import Trace, json_schema

    rec = Recorder("summaries")
    rec.start_trace("k")
    rec.record(CallRecord("k", "summarise", question=None, response=SUMMARY, context=[SOURCE]))
    rec.record(CallRecord("k", "summarise", question="\u200b", response=SUMMARY, context=[]))
    rec.end_trace("k")
    trace = rec.get_trace("k")
    scored, skipped = trace.steps
    assert scored.method == "support" and scored.triage == "flagged" and scored.result.evidence.weakest == 1
    assert skipped.method == "skipped" and "no question and no context" in skipped.skip_reason
    assert Trace.from_json(trace.to_json()).to_json() == trace.to_json()
    jsonschema.validate(trace.to_dict(), json_schema())
    redacted = trace.to_json(redact=True)
    assert "Academy" not in redacted and "Poseidon" not in redacted
    jsonschema.validate(trace.to_dict(redact=True), json_schema())


# ---------------------------------------------------------------- command line


def test_check_without_question_prints_sentences_and_marks_unsupported_words(capsys):
    from groundlens_core.cli import main

    assert main(["check", "-c", SOURCE, "-r", SUMMARY]) == 0
    out = capsys.readouterr().out
    assert out.startswith("score ") and "FLAGGED" in out.splitlines()[0] and "SUPPORT " in out.splitlines()[0]
    assert "It [[won]] [[three]] [[Academy]] [[Awards]] in [[2007]].  <- weakest" in out
    assert "[[181,674,817]]" not in out and "best passage (similarity" in out
    assert main(["check", "-r", SUMMARY]) == 2  # neither question nor context: the one-line error
    assert capsys.readouterr().err.strip() == "groundlens: error: question is missing"


def test_evaluate_file_without_question_column_appends_evidence_columns(tmp_path):
    import csv

    from groundlens_core.cli import main

    src = tmp_path / "summaries.csv"
    with open(src, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["id", "context", "response"])
        w.writeheader()
        w.writerow({"id": "bad", "context": SOURCE, "response": SUMMARY})
        w.writerow({"id": "good", "context": SOURCE, "response": "Poseidon grossed $181,674,817."})
        w.writerow({"id": "none", "context": "", "response": "No source."})
    out = tmp_path / "out.csv"
    assert main(["evaluate", str(src), "-o", str(out), "--sort"]) == 0
    rows = {r["id"]: r for r in csv.DictReader(open(out, encoding="utf-8"))}
    assert rows["bad"]["groundlens_method"] == rows["good"]["groundlens_method"] == "support"
    assert rows["bad"]["groundlens_weakest_sentence"] == "It won three Academy Awards in 2007."
    assert rows["bad"]["groundlens_unsupported"] == "won; three; Academy; Awards; 2007"
    assert float(rows["bad"]["groundlens_support"]) < 0.8 <= float(rows["good"]["groundlens_support"]) == 1.0
    assert rows["good"]["groundlens_weakest_sentence"] == "" and rows["good"]["groundlens_unsupported"] == ""
    assert rows["none"]["groundlens_method"] == "error" and rows["none"]["groundlens_error"] == "question is missing"


# ---------------------------------------------------------------- benchmark


def test_benchmark_on_a_users_file_publishes_every_signal_with_intervals(tmp_path, capsys):
    from groundlens_core.cli import main

    src = tmp_path / "mine.jsonl"
    bad_summary = SUMMARY
    spans = [[bad_summary.index("It won"), len(bad_summary)]]
    rows = [
        {"question": "How much did Poseidon gross?", "context": SOURCE, "response": "It grossed $181,674,817.", "label": 1},
        {"question": "Who directed Poseidon?", "context": SOURCE, "response": "Wolfgang Petersen directed it.", "label": 1},
        {"question": "Who directed Poseidon?", "context": SOURCE, "response": "Steven Spielberg directed it in 1999.", "label": 0},
        {"question": "", "context": SOURCE, "response": bad_summary, "label": 0, "spans": json.dumps(spans)},
        {"question": "What was the budget?", "context": SOURCE, "response": "The budget was $160 million.", "label": 1},
        {"question": "What was the budget?", "context": SOURCE, "response": "The budget was $95 million, paid by Sony.", "label": 0},
    ]
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    assert main(["benchmark", "--data", str(src), "--bootstrap", "50", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (s,) = report["sets"]
    assert s["rows"] == 6 and s["grounded"] == 3 and s["errors"] == 0 and s["rows_per_second"] > 0
    assert set(s["auroc"]) == {"sgi", "dgi", "support", "facts (fewer failed findings)", "triage ranking",
                               "baseline: shorter response", "baseline: word overlap with context"}
    for v in s["auroc"].values():
        assert 0.0 <= v["low"] <= v["auroc"] <= v["high"] <= 1.0
    assert s["auroc"]["support"]["auroc"] == 1.0 and s["auroc"]["support"]["rows"] == 6
    assert s["auroc"]["sgi"]["rows"] == 5  # SGI is never computed on the row without a question
    assert s["localisation"]["weakest sentence"] == {"rate": 1.0, "low": 1.0, "high": 1.0, "rows": 1}
    assert main(["benchmark", "--data", str(src), "--bootstrap", "20"]) == 0
    text = capsys.readouterr().out
    assert "95% bootstrap interval" in text and "length-matched" in text and "localisation" in text
    nolabel = tmp_path / "nolabel.csv"
    nolabel.write_text("question,response\nq,r\n", encoding="utf-8")
    assert main(["benchmark", "--data", str(nolabel)]) == 2
    assert "missing column label" in capsys.readouterr().err


def test_faithbench_is_read_only_from_what_the_user_names_and_never_bundled(tmp_path, monkeypatch):
    """FaithBench comes from --faithbench, GROUNDLENS_FAITHBENCH or GROUNDLENS_SHARED_DATA; a
    ``shared/data`` folder above the working directory or the package is never searched."""
    from importlib import resources

    from groundlens_core.quality.benchmark import faithbench_path

    assert not resources.files("groundlens_core.data").joinpath("faithbench_dev.csv").is_file()
    beside = tmp_path / "shared" / "data"
    beside.mkdir(parents=True)
    (beside / "faithbench_dev.csv").write_text("response,label\nr,1\n", encoding="utf-8")
    checkout = tmp_path / "checkout" / "worktree"
    checkout.mkdir(parents=True)
    monkeypatch.chdir(checkout)
    monkeypatch.delenv("GROUNDLENS_FAITHBENCH", raising=False)
    monkeypatch.delenv("GROUNDLENS_SHARED_DATA", raising=False)
    assert faithbench_path() is None
    monkeypatch.setenv("GROUNDLENS_SHARED_DATA", str(beside))
    assert faithbench_path() == beside / "faithbench_dev.csv"
    monkeypatch.setenv("GROUNDLENS_FAITHBENCH", str(tmp_path / "named.csv"))
    assert faithbench_path() == tmp_path / "named.csv"
    assert faithbench_path(tmp_path / "given.csv") == tmp_path / "given.csv"


# ---------------------------------------------------------------- OpenTelemetry


def test_otel_carries_support_and_weakest_sentence_cut_and_redacted():
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from groundlens_core.trace import CallRecord, Recorder
    from groundlens_core.trace.otel import export_trace

    rec = Recorder("otel-evidence")
    rec.start_trace("k")
    long_tail = " It also won three Academy Awards in 2007" + ", and more" * 80 + "."
    rec.record(CallRecord("k", "summarise", question=None, response=SUMMARY + long_tail, context=[SOURCE]))
    rec.end_trace("k")
    trace = rec.get_trace("k")
    for redact in (False, True):
        spans_out, logs_out = InMemorySpanExporter(), InMemoryLogRecordExporter()
        tp, lp = TracerProvider(), LoggerProvider()
        tp.add_span_processor(SimpleSpanProcessor(spans_out))
        lp.add_log_record_processor(SimpleLogRecordProcessor(logs_out))
        export_trace(trace, tp, lp, redact=redact)
        (span,) = [s for s in spans_out.get_finished_spans() if s.attributes.get("groundlens.node") == "summarise"]
        a = span.attributes
        assert a["gen_ai.evaluation.name"] == "groundlens.support" and a["groundlens.support"] < 0.8
        assert a["groundlens.score"] == trace.steps[-1].score and "groundlens.rank" not in a  # the score ranked is the one shown
        weakest = a["groundlens.weakest_sentence"]
        (log,) = [r.log_record for r in logs_out.get_finished_logs()]
        assert log.attributes["groundlens.weakest_sentence"] == weakest
        if redact:
            assert weakest == "[redacted]" and "Academy" not in json.dumps(dict(a))
            assert "Academy" not in str(dict(log.attributes))
        else:
            assert weakest.startswith("It also won three Academy Awards in 2007") and weakest.endswith("chars]")
            assert len(weakest) <= 512 + 30 and "Academy" in a["groundlens.unsupported"]


# ---------------------------------------------------------------- model work of the evidence


class _Counting:
    """The real backend, recording every text the scorer hands it."""

    def __init__(self, inner):
        self.inner = inner
        self.seen: list[str] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode(self, texts):
        self.seen += list(texts)
        return self.inner.encode(texts)

    def encode_spans(self, texts, spans):
        self.seen += list(texts)
        return self.inner.encode_spans(texts, spans)


def test_the_evidence_runs_each_whole_text_once_and_no_sentence_alone():
    from groundlens_core.embedding.cache import CachedEmbedder

    counting = _Counting(gl.get_embedder().inner)
    emb = CachedEmbedder(counting)
    items = [
        {"question": "How much did Poseidon gross?", "response": "It grossed $181,674,817. It cost $160 million.", "context": SOURCE},
        {"question": "Who directed Poseidon?", "response": "Wolfgang Petersen directed it.", "context": SOURCE},
        {"response": SUMMARY, "context": SOURCE},
    ]
    batch = gl.evaluate_batch(items, embedder=emb)
    expected = [items[0]["question"], items[0]["response"], items[1]["question"], items[1]["response"], SOURCE, SUMMARY]
    assert sorted(counting.seen) == sorted(expected)  # each text once; no sentence of them on its own
    assert all(len(r.evidence.sentences) >= 1 for r in batch)
    # the same bits as the shared embedder, which scores them item by item
    for it, res in zip(items, batch):
        assert gl.evaluate(it.get("question"), it["response"], it["context"]).to_json() == res.to_json()
    # the next step of the run has the same context: only its new texts reach the model
    counting.seen.clear()
    gl.evaluate("When was it released?", "It was released in 2006.", SOURCE, embedder=emb)
    assert sorted(counting.seen) == ["It was released in 2006.", "When was it released?"]
