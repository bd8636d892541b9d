"""The README's and the docs' samples are what the product does: outputs are produced again and
compared, and the figures the prose quotes are read from the tables they come from.

(The LangGraph summary lines are compared with the demo's trace in test_examples.py, which runs it.)
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest

from groundlens_core.batch.columns import OUT_COLUMNS
from groundlens_core.cli import main

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def blocks(name: str) -> list[str]:
    return FENCE.findall(read(name))


def console_sample(name: str, command: str) -> tuple[list[str], list[str]]:
    """``(argv, output lines)`` of the console block of ``name`` whose first line starts with ``$ <command>``."""
    (block,) = [b for b in blocks(name) if b.startswith(f"$ {command}")]
    lines = block.splitlines()
    cmd = []
    while True:
        line = lines.pop(0)
        cmd.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    argv = shlex.split(" ".join(cmd).removeprefix("$ "))
    assert argv[0] == "groundlens"
    return argv[1:], lines


# ---------------------------------------------------------------- docs/cli.md


def test_cli_check_sample_is_what_check_prints(capsys):
    argv, want = console_sample("docs/cli.md", "groundlens check")
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines() == want


def test_cli_missing_column_sample_is_the_error_evaluate_gives(tmp_path, monkeypatch, capsys):
    argv, want = console_sample("docs/cli.md", "groundlens evaluate renamed.csv")
    header = re.search(r"found: ([\w, ]+)$", want[0]).group(1).split(", ")
    monkeypatch.chdir(tmp_path)
    (tmp_path / argv[1]).write_text(",".join(header) + "\n" + ",".join(f"v{i}" for i in range(len(header))) + "\n")
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == want


def test_cli_no_context_sample_is_the_warning_evaluate_gives(tmp_path, monkeypatch, capsys):
    argv, want = console_sample("docs/cli.md", "groundlens evaluate passages.csv")
    monkeypatch.chdir(tmp_path)
    (tmp_path / argv[1]).write_text("question,response,passage\nWhere?,In Delhi.,The office is in Delhi.\n")
    assert main(argv) == 0
    assert [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")] == want


def test_cli_lists_every_appended_column_in_order():
    text = read("docs/cli.md")
    start = text.index("`evaluate` keeps every input column and appends")
    paragraph = text[start : text.index("a bad row gets an error", start)]
    assert re.findall(r"`(groundlens_\w+)`", paragraph) == list(OUT_COLUMNS)


def test_cli_names_every_evaluate_option():
    from groundlens_core.cli import build_parser

    parser = build_parser()
    evaluate = parser._subparsers._group_actions[0].choices["evaluate"]  # type: ignore[union-attr]
    text = "".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").rglob("*.md")))

    def documented(action) -> bool:  # under any of its spellings (-o or --output)
        return any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text) for o in action.option_strings)

    missing = [
        a.option_strings[-1] for a in evaluate._actions if a.option_strings and a.dest != "help" and not documented(a)
    ]
    assert missing == []


# ---------------------------------------------------------------- the evaluator's sample


@pytest.mark.parametrize("name", ["README.md", "docs/integrations/langchain.md"])
def test_evaluator_sample_is_what_the_evaluator_returns(name):
    (block,) = [b for b in blocks(name) if '# -> {"key": "groundlens"' in b]
    code, shown = block.split("# -> ", 1)
    tree = ast.parse(code)
    setup = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.Assign))]
    call = [n for n in tree.body if isinstance(n, ast.Expr)][-1]  # the evaluator call the comment shows
    namespace: dict = {}
    exec(compile(ast.Module(body=setup, type_ignores=[]), name, "exec"), namespace)
    got = eval(compile(ast.Expression(call.value), name, "eval"), namespace)
    assert got["key"] == re.search(r'"key": "(\w+)"', shown).group(1)
    assert f"{got['score']:.2f}" == re.search(r'"score": ([\d.]+)', shown).group(1)
    prefix = re.search(r'"comment": "(.*?)(?:\.\.\.)?"', shown).group(1).strip()
    assert prefix and got["comment"].startswith(prefix), (prefix, got["comment"])
    meta = re.search(r'"metadata": \{(.*)\}', shown, re.S).group(1)
    for field, text in re.findall(r'"(\w+)": ("[^"]*"|[\d.]+)', meta):
        value = got["metadata"][field]
        assert (text.strip('"') == value) if text.startswith('"') else (f"{value:.2f}" == text), (field, text, value)


# ---------------------------------------------------------------- docs/quality.md against its tables


def quality_tables() -> dict[str, dict[str, tuple[float, float, float, float]]]:
    """``{data set: {signal: (AUROC, low, high, length-matched)}}`` from the tables of docs/quality.md."""
    tables: dict[str, dict[str, tuple[float, float, float, float]]] = {}
    current = None
    for line in read("docs/quality.md").splitlines():
        head = re.match(r"\*\*(.+?)\*\* \(", line)
        if head:
            current = tables.setdefault(head.group(1), {})
        row = re.match(r"\| (.+?) \| \**([\d.]+) \[([\d.]+), ([\d.]+)\]\** \| \**([\d.]+)\** \|$", line)
        if row and current is not None:
            signal = row.group(1).strip("*").split("**")[0].strip()
            current[signal] = tuple(float(row.group(k)) for k in (2, 3, 4, 5))  # type: ignore[assignment]
    return tables


def quoted(name: str, pattern: str) -> str:
    found = re.findall(pattern, read(name))
    assert len(found) == 1, (name, pattern, found)
    return found[0]


def test_quality_prose_quotes_its_own_tables():
    t = quality_tables()
    qa, claims, claims2, fb = t["HaluEval QA"], t["Claim set 1"], t["Claim set 2"], t["FaithBench dev"]
    assert set(qa) >= {"SGI", "support", "triage ranking", "baseline: shorter response"}
    q = "docs/quality.md"
    checks = [
        (quoted(q, r"shorter-response baseline \((\d+(?:\.\d+)?)\)"), qa["baseline: shorter response"][0]),
        (quoted(q, r"Within length strata it drops to (\d+(?:\.\d+)?)"), qa["baseline: shorter response"][3]),
        (quoted(q, r"triage ranking keeps (\d+(?:\.\d+)?)"), qa["triage ranking"][3]),
        (quoted(q, r"triage ranking keeps [\d.]+ and support (\d+(?:\.\d+)?)"), qa["support"][3]),
        (quoted(q, r"HaluEval QA unchanged at (\d+(?:\.\d+)?)"), qa["support"][0]),
        (quoted(q, r"the score's (\d+(?:\.\d+)?) beats"), fb["triage ranking"][0]),
        (quoted(q, r"both modes give\s+(\d+(?:\.\d+)?)"), qa["SGI"][0]),
    ]
    for text, value in checks:
        assert float(text) == value, (text, value)
    low, high = quoted(q, r"its interval is wide \((\d+(?:\.\d+)?)–(\d+(?:\.\d+)?)\)")
    assert (float(low), float(high)) == (round(fb["triage ranking"][1], 2), round(fb["triage ranking"][2], 2))
    dgi = quoted(q, r"DGI (\d+(?:\.\d+)?) \[[\d.]+, [\d.]+\], shorter response")
    assert quoted(q, r"barely better than chance\*\* \((\d+(?:\.\d+)?)\)") == dgi
    # the README's rounded figures
    r = "README.md"
    one, two = quoted(r, r"\(AUROC\s+(\d+\.\d+) and (\d+\.\d+), on the rows\s+the rules")
    assert (float(one), float(two)) == (round(claims["triage ranking"][0], 2), round(claims2["triage ranking"][0], 2))
    assert float(quoted(r, r"on HaluEval QA the ranking reaches AUROC (\d+(?:\.\d+)?)")) == round(
        qa["triage ranking"][0], 2
    )
    assert float(quoted(r, r"FaithBench\s+summaries (\d+(?:\.\d+)?)")) == round(fb["triage ranking"][0], 2)
    assert quoted(r, r"held-out data \((\d+(?:\.\d+)?)\)") == dgi
    ok1, bad1 = map(int, quoted(q, r"flagged: (\d+) of 24 paraphrases, (\d+) of 36 changed answers"))
    ok2, bad2 = map(int, quoted(q, r"flagged: (\d+) of 24 correct answers, (\d+) of 36 wrong ones"))
    assert quoted(r, r"(\d+\s+of \d+ correct answers and \d+ of \d+ wrong ones)").split() == (
        f"{ok1 + ok2} of 48 correct answers and {bad1 + bad2} of 72 wrong ones".split()
    )
