"""Shared test set-up: offline flags, and CrewAI's phone-home switches, before anything imports."""

import os
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")
os.environ.setdefault("GROUNDLENS_TEST_HOME", tempfile.mkdtemp(prefix="groundlens-home-"))
# our own failures at the boundaries (an exporter, a listener, an adapter) are raised, not logged
# (groundlens_core/internal_errors.py); a test that injects one on purpose asks for
# ``internal_errors_logged``. Subprocesses the tests start inherit it.
os.environ["GROUNDLENS_RAISE_INTERNAL_ERRORS"] = "1"


import pytest  # noqa: E402

#: verified grounded (question, response) pairs for a small DGI direction built with the real model
GROUNDED_PAIRS = [
    ("What is the capital of France?", "The capital of France is Paris."),
    ("Who wrote Hamlet?", "Hamlet was written by William Shakespeare."),
    ("How many legs does a spider have?", "A spider has eight legs."),
    ("What is the boiling point of water at sea level?", "Water boils at 100 degrees Celsius at sea level."),
    ("What gas do plants absorb?", "Plants absorb carbon dioxide from the air."),
    ("What is the largest ocean?", "The Pacific Ocean is the largest ocean on Earth."),
    ("How long is a marathon?", "A marathon is 42.195 kilometres long."),
]


@pytest.fixture(autouse=True)
def _no_internal_error_left():
    """Fail a test whose code hit an internal error that nothing raised to it: a failure on the
    recorder's worker that no flush reported, or one a framework swallowed (LangChain logs what a
    callback raises)."""
    from groundlens_core import internal_errors

    internal_errors.take_seen()  # a late one from the test before belongs to it, not to this one
    yield
    seen = internal_errors.take_seen()
    if seen:
        where, exc = seen[0]
        pytest.fail(f"internal error in {where}: {type(exc).__name__}: {exc} ({len(seen)} in all)", pytrace=False)


@pytest.fixture
def internal_errors_logged(monkeypatch):
    """For a test that injects a failure of ours on purpose: logged and recovered from, as in a
    user's program, instead of raised."""
    monkeypatch.setenv("GROUNDLENS_RAISE_INTERNAL_ERRORS", "0")


@pytest.fixture(scope="session")
def dgi_calibration():
    """A DGI direction fitted on GROUNDED_PAIRS, so plugin tests never depend on the bundled direction."""
    from groundlens_core import calibrate

    return calibrate(pairs=GROUNDED_PAIRS, metadata={"name": "test-pairs"})


class BrokenEmbedder:
    """Any use fails: stands in for a broken model or a bug in our scoring (failure-injection tests)."""

    def __getattr__(self, name):
        raise RuntimeError("embedder exploded")


@pytest.fixture(scope="module")
def _fake_llm_server_for_module():
    from fake_llm_server import FakeLLMServer

    server = FakeLLMServer()
    yield server
    server.close()


@pytest.fixture
def fake_llm_server(_fake_llm_server_for_module):
    """A scripted HTTP server on 127.0.0.1 that the real SDK clients talk to (tests/fake_llm_server.py).

    One server per test module; its queue, default handler and recorded requests are reset for
    every test."""
    server = _fake_llm_server_for_module
    server.reset()
    server.default = None
    yield server
    server.reset()
