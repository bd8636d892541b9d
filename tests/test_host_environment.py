"""Importing and using groundlens leaves the host process's environment as it was.

An application that adds groundlens keeps its own Hugging Face settings: a retriever or reranker
that downloads its model still can (``HF_HUB_OFFLINE=0`` stays "0"), and an unset variable stays
unset. The packaged model loads from local files by itself, so no setting of ours is needed: the
child process below imports every adapter (and the framework behind each), scores with both
backends, and records any connection it tries; only loopback would be allowed, and none is made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

#: the variables an import used to force; none of them may change
WATCHED = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY", "TOKENIZERS_PARALLELISM")

FRAMEWORKS = (
    "langchain_core",
    "langgraph.graph",
    "crewai",
    "semantic_kernel",
    "autogen_agentchat",
    "autogen_ext.models.replay",
    "openai",
    "anthropic",
    "google.genai",
)

CHILD = textwrap.dedent(
    """
    import importlib, json, os, sys

    WATCHED, FRAMEWORKS = %r, %r
    connects = []

    def audit(event, args):
        if event == "socket.connect":
            connects.append(repr(args[1]))
        elif event == "socket.getaddrinfo":
            connects.append("lookup " + repr(args[0]))

    sys.addaudithook(audit)
    given = {k: os.environ.get(k) for k in WATCHED}
    # the frameworks first, so that what they set themselves (CrewAI sets TOKENIZERS_PARALLELISM on
    # import) is not counted as ours
    for framework in FRAMEWORKS:
        importlib.import_module(framework)
    before = {k: os.environ.get(k) for k in WATCHED}

    import groundlens_core
    from groundlens_core.embedding import get_embedder

    adapters = ["providers.anthropic", "autogen", "crewai", "providers.google", "langchain", "langgraph", "providers.openai", "semantic_kernel"]
    touched = 0
    for name in adapters:
        module = importlib.import_module("groundlens_core.plugins." + name)
        for public in module.__all__:  # builds the lazy classes, so each framework is imported too
            getattr(module, public)
            touched += 1
    from groundlens_core import providers  # noqa: F401

    shapes = [get_embedder(backend=b).encode(["The office is in Delhi."]).shape[1] for b in ("packed-torch", "sentence-transformers")]
    score = groundlens_core.evaluate("Where is the office?", "The office is in Delhi.", "The head office is in Delhi.")

    after = {k: os.environ.get(k) for k in WATCHED}
    print(json.dumps({"given": given, "before": before, "after": after, "connects": connects, "touched": touched,
                      "dims": shapes, "band": score.triage}))
    """
)


def _run(tmp_path, hf_hub_offline: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in WATCHED}
    if hf_hub_offline is not None:
        env["HF_HUB_OFFLINE"] = hf_hub_offline
    env.update(
        HOME=str(tmp_path),
        CREWAI_DISABLE_TELEMETRY="true",
        CREWAI_TRACING_ENABLED="false",
        CREWAI_DISABLE_VERSION_CHECK="true",
    )
    proc = subprocess.run(
        [sys.executable, "-c", CHILD % (WATCHED, FRAMEWORKS)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("hf_hub_offline", ["0", None], ids=["HF_HUB_OFFLINE=0", "unset"])
def test_importing_every_adapter_and_scoring_leaves_the_environment_alone(tmp_path, hf_hub_offline):
    seen = _run(tmp_path, hf_hub_offline)
    assert seen["touched"] > 30  # every adapter's public names were reached, frameworks included
    assert seen["dims"] == [384, 384] and seen["band"] == "trusted"  # the packaged model, both backends
    assert seen["given"] == {k: None for k in WATCHED} | {"HF_HUB_OFFLINE": hf_hub_offline}
    assert seen["before"]["HF_HUB_OFFLINE"] == hf_hub_offline
    assert seen["after"] == seen["before"]  # groundlens itself set nothing, and unset nothing
    assert seen["connects"] == []  # nothing looked up or reached: the model is read from local files
