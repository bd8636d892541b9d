"""Shared test set-up: offline flags, and CrewAI's phone-home switches, before anything imports."""

import os
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")
os.environ.setdefault("GROUNDLENS_TEST_HOME", tempfile.mkdtemp(prefix="groundlens-home-"))
