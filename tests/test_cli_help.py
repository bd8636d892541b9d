"""Every option of every ``groundlens`` command says what it is for in ``--help``."""

from __future__ import annotations

import argparse

import pytest

from groundlens_core.cli import build_parser, main


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_option_and_argument_of_every_command_has_help_text():
    bare = [
        f"{name} {'/'.join(a.option_strings) or a.dest}"
        for name, command in _commands().items()
        for a in command._actions
        if a.dest != "help" and not (a.help or "").strip()
    ]
    assert bare == []


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("check", ["--long-context {mean,nearest}", "nearest = the piece nearest the response", "-r RESPONSE"]),
        ("evaluate", ["--calibration CALIBRATION", "for rows without a context", "--long-context"]),
        ("report", ["-o OUTPUT", "the HTML file to write", "--title TITLE", "groundlens triage"]),
    ],
)
def test_help_names_what_the_options_do(command, words, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps to the terminal's width
    for w in words:
        assert w in out, w
