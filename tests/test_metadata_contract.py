"""The seams between adapters, the trace model and the exporters.

* Every step/trace metadata key an exporter (``trace/``) reads is a ``META_*`` constant of
  ``groundlens_core.trace.model``, and some adapter (``plugins/``) or the recorder writes that constant: a key can
  no longer be documented and read by an exporter while no adapter ever sets it.
* ``trace/`` never imports ``plugins/``; the scoring core imports neither;
  ``calibration`` does not import ``scoring`` (no cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

from groundlens_core.trace import model

ROOT = Path(__file__).resolve().parents[1]


def _modules(folder: str) -> dict[str, ast.Module]:
    """Every module below ``folder``, by its path in it (``recorder/worker.py``)."""
    base = ROOT / folder
    return {
        p.relative_to(base).as_posix(): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(base.rglob("*.py"))
    }


def _mentions_metadata(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "metadata" for n in ast.walk(node))


def metadata_reads(tree: ast.Module) -> list[ast.expr]:
    """The key expressions of ``<x>.metadata[key]`` and ``(<x>.metadata ...).get(key)``."""
    keys: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _mentions_metadata(node.value):
            keys.append(node.slice)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and _mentions_metadata(node.func.value)
        ):
            keys.append(node.args[0])
    return keys


def names_used(tree: ast.Module) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def test_every_metadata_key_an_exporter_reads_is_written_by_an_adapter():
    constants = {name for name in dir(model) if name.startswith("META_")}
    read: dict[str, str] = {}
    for name, tree in _modules("trace").items():
        for key in metadata_reads(tree):
            assert isinstance(key, ast.Name) and key.id in constants, (
                f"trace/{name} reads step/trace metadata with {ast.unparse(key)}: use a META_* constant "
                "of groundlens_core.trace.model that an adapter writes"
            )
            read[key.id] = name
    assert {"META_TOOL", "META_SINGLE_AGENT"} <= set(read), read  # the keys the OTel export uses
    written = set().union(*(names_used(tree) for tree in _modules("plugins").values()))
    recorder = [tree for name, tree in _modules("trace").items() if name.startswith("recorder/")]
    written |= set().union(*(names_used(tree) for tree in recorder))  # what the recorder counts itself (sampling)
    missing = sorted(set(read) - written)
    assert not missing, f"exporters read {missing}, which no adapter in plugins/ (nor the recorder) writes"


def test_the_contract_scan_sees_literal_keys():
    tree = ast.parse("def f(step):\n    return step.metadata.get('tool_name'), (step.metadata or {})['x']\n")
    assert [ast.unparse(k) for k in metadata_reads(tree)] == ["'tool_name'", "'x'"]


def _imports(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_layering_and_no_import_cycle():
    for name, tree in _modules("trace").items():
        assert not any(m.startswith("groundlens_core.plugins") for m in _imports(tree)), f"trace/{name} imports plugins"
    # the scoring core proper (tests/test_layering.py checks the whole core, the providers facade aside)
    core_files = [
        ROOT / "groundlens_core" / f
        for f in (
            "scoring/bands.py",
            "scoring/results.py",
            "scoring/__init__.py",
            "scoring/calibration.py",
            "errors.py",
            "_imports.py",
            "quality/metrics.py",
        )
    ]
    for path in core_files + sorted((ROOT / "groundlens_core" / "embedding").glob("*.py")):
        mods = _imports(ast.parse(path.read_text(encoding="utf-8")))
        assert not any(m.startswith(("groundlens_core.plugins", "groundlens_core.trace")) for m in mods), path
    core = _modules("groundlens_core")
    assert "groundlens_core.scoring" not in _imports(core["scoring/calibration.py"])
    assert "groundlens_core.scoring.calibration" in _imports(core["scoring/__init__.py"])  # one direction only
