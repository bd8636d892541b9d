"""The wheel maps plugins/, trace/ and templates/ into groundlens_core, outside the editable checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    """The wheel ``python -m build`` makes, and what the build printed."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
                          check=True, capture_output=True, text=True, timeout=600)
    (whl,) = out.glob("groundlens_core-*.whl")
    return whl, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def wheel(built) -> Path:
    return built[0]


def test_the_build_prints_no_packaging_warnings_and_the_licence_is_spdx(built):
    whl, printed = built
    assert "Warning" not in printed and "deprecated" not in printed.lower(), printed[-3000:]
    metadata = next(n for n in zipfile.ZipFile(whl).namelist() if n.endswith(".dist-info/METADATA"))
    lines = zipfile.ZipFile(whl).read(metadata).decode().splitlines()
    assert "License-Expression: MIT" in lines
    assert not [x for x in lines if x.startswith("Classifier: License ::")]


def test_wheel_has_one_namespace(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert "trace" not in top and "plugins" not in top and "templates" not in top
    assert any(n.startswith("groundlens_core/trace/") for n in names)
    assert any(n.startswith("groundlens_core/plugins/") for n in names)
    assert "groundlens_core/providers/openai.py" in names and "groundlens_core/plugins/providers/__init__.py" in names
    assert any(n.startswith("groundlens_core/templates/") and n.endswith(".j2") for n in names)
    assert "groundlens_core/data/dgi_direction_halueval_general.json" in names
    assert "groundlens_core/trace/schema.json" in names
    assert "groundlens_core/ledger/verify.py" in names and "groundlens_core/trace/cli.py" in names
    entry = [n for n in names if n.endswith("entry_points.txt")]
    eps = zipfile.ZipFile(wheel).read(entry[0]).decode() if entry else ""
    assert "groundlens = groundlens_core.cli:main" in eps
    # the trace package plugs its command and the batch HTML writer into the core (docs/architecture.md)
    assert "[groundlens_core.commands]" in eps and "groundlens_core.trace.cli:add_commands" in eps
    assert "[groundlens_core.batch_html]" in eps and "groundlens_core.trace.html.batch_report:write_batch_html" in eps


def test_wheel_installs_and_imports_in_a_fresh_venv(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True, timeout=300)
    # dependencies come from this test run's environment (appended, so the fresh install wins)
    deps = sysconfig.get_paths()["purelib"]
    code = (
        "import sys, importlib, importlib.resources as r\n"
        "import groundlens_core, groundlens_core.trace, groundlens_core.plugins, groundlens_core.cli\n"
        "import groundlens_core.trace.html, groundlens_core.trace.otel, groundlens_core.trace.html.batch_trace\n"
        "for m in ('langgraph','langchain','crewai','semantic_kernel','autogen','providers.openai','providers.anthropic','providers.google','sources.phoenix','sources.langfuse'):\n"
        "    importlib.import_module('groundlens_core.plugins.' + m)\n"
        "import groundlens_core.providers, groundlens_core.providers.openai\n"
        "assert groundlens_core.providers.openai.OpenAIProvider.provider == 'openai'\n"
        "import groundlens_core.providers.anthropic as a, groundlens_core.providers.google as g\n"
        "assert (a.AnthropicProvider.provider, g.GoogleProvider.provider) == ('anthropic', 'gcp.gemini')\n"
        "assert '/site-packages/groundlens_core/' in groundlens_core.__file__, groundlens_core.__file__\n"
        "assert groundlens_core.trace.__file__.startswith(groundlens_core.__file__.rsplit('/', 1)[0])\n"
        "names = [p.name for p in r.files('groundlens_core.templates').iterdir()]\n"
        "assert any(n.endswith('.j2') for n in names), names\n"
        "import trace as stdlib_trace; assert hasattr(stdlib_trace, 'Trace') and 'site-packages' not in stdlib_trace.__file__\n"
        "print('ok', groundlens_core.__version__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["PYTHONPATH"] = deps
    proc = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok ")
