"""Shared test set-up: offline flags, and CrewAI's phone-home switches, before anything imports."""

import os
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")
os.environ.setdefault("GROUNDLENS_TEST_HOME", tempfile.mkdtemp(prefix="groundlens-home-"))


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
