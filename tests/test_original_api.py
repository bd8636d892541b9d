"""The original groundlens README, run as written: only the import lines say ``groundlens_core``.

A user coming from the original package follows its README: ``step.node_name``,
``step.score.value``, ``trace.to_html(path=...)``, ``trace.to_dict()``,
``calibrate(csv_path=...)`` with ``.concentration`` and ``.save(...)``, and
``compute_dgi(question, response, reference_csv=...)``. Real LangGraph graph, real model.
"""

from __future__ import annotations

import csv
import json

import pytest
from conftest import GROUNDED_PAIRS
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from scripted_graphs import QAState, linear_graph

# --- the original README's imports, pointed at groundlens_core
from groundlens_core import calibrate, compute_dgi
from groundlens_core.plugins.langgraph import GroundlensLangGraphCallback

QUESTION = "What is the population of Paris?"
FACTS = "Paris is the capital of France and has about 2.1 million inhabitants."
UNGROUNDED = "Paris population statistics: the number of residents living in Paris."


def build_graph():
    model = GenericFakeChatModel(messages=iter([UNGROUNDED]))

    def retrieve(state: QAState) -> QAState:
        return {"context": FACTS}

    def answer(state: QAState) -> QAState:
        prompt = f"Context: {state['context']}"
        return {"answer": model.invoke([("system", prompt), ("human", state["question"])]).content}

    return linear_graph(QAState, retrieve=retrieve, answer=answer)


def test_the_original_readme_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    graph = build_graph()

    # --- the original README, unchanged from here on
    cb = GroundlensLangGraphCallback()
    result = graph.invoke({"question": QUESTION}, config={"callbacks": [cb]})
    trace = cb.get_trace()

    for step in trace.steps:
        if step.triage == "flagged":
            print(f"{step.node_name}: {step.method}={step.score.value:.3f}")

    trace.to_html(path="triage_report.html")
    data = trace.to_dict()
    # --- end of the README

    printed = capsys.readouterr().out.strip().splitlines()
    flagged = [s for s in trace.steps if s.triage == "flagged"]
    assert result["answer"] == UNGROUNDED and len(flagged) == 1
    assert printed == [f"answer: sgi={flagged[0].result.value:.3f}"]
    assert flagged[0].node_name == flagged[0].node == "answer"
    html = (tmp_path / "triage_report.html").read_text(encoding="utf-8")
    assert "<html" in html.lower() and "answer" in html
    assert data["steps"][-1]["result"]["value"] == flagged[0].result.value
    json.dumps(data)  # plain data


def test_the_original_calibration_and_reference_csv(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open("my_grounded_pairs.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["question", "response"])
        w.writerows(GROUNDED_PAIRS)

    # --- the original README
    result = calibrate(csv_path="my_grounded_pairs.csv")
    print(f"concentration: {result.concentration:.3f}")
    result.save("my_direction.json")
    score = compute_dgi("Who wrote Hamlet?", "Hamlet was written by William Shakespeare.",
                        reference_csv="my_grounded_pairs.csv")
    # --- end of the README

    assert 0.0 < result.concentration <= 1.0
    assert json.loads((tmp_path / "my_direction.json").read_text())["concentration"] == result.concentration
    same = compute_dgi("Who wrote Hamlet?", "Hamlet was written by William Shakespeare.", calibration=result)
    assert score.method == "dgi" and score.value == same.value and score.direction == same.direction
    with pytest.raises(ValueError, match="not both"):
        compute_dgi("q?", "r.", calibration=result, reference_csv="my_grounded_pairs.csv")


def test_reference_csv_is_calibrated_once(tmp_path, monkeypatch):
    from groundlens_core.scoring import calibration as cal_module

    path = tmp_path / "pairs.csv"
    path.write_text("question,response\n" + "".join(f'"{q}","{r}"\n' for q, r in GROUNDED_PAIRS), encoding="utf-8")
    calls = []
    real = cal_module.calibrate
    monkeypatch.setattr(cal_module, "calibrate", lambda **kw: calls.append(kw) or real(**kw))
    first = compute_dgi("What is the largest ocean?", "The Pacific.", reference_csv=path)
    second = compute_dgi("What is the largest ocean?", "The Pacific.", reference_csv=str(path))
    assert first == second and len(calls) <= 1  # 0 when an earlier test cached the same content
    before = len(calls)
    path.write_text(path.read_text(encoding="utf-8") + '"How many days in a week?","A week has seven days."\n',
                    encoding="utf-8")
    compute_dgi("What is the largest ocean?", "The Pacific.", reference_csv=path)
    assert len(calls) == before + 1 and calls[-1]["csv_path"] == path  # new content: calibrated again
