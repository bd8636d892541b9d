"""Every adapter's constructor names its options: ``help(GroundlensLangGraphCallback)`` shows
``tracer_provider=``, ``listeners=`` ... with their defaults, the same on every adapter as on the
shell they share, and no catch-all ``**kwargs`` hides them (a provider guard's ``**kwargs`` is the
SDK client's own, e.g. ``api_key=``)."""

from __future__ import annotations

import inspect
import pydoc

import pytest

from groundlens_core.plugins.kit.shell import SHELL_KEYWORDS, AdapterShell, ShellOptions, ShellOptionsBesideName

#: (module, class) of every adapter a user constructs
ADAPTERS = [
    ("langchain", "GroundlensCallback"),
    ("langgraph", "GroundlensLangGraphCallback"),
    ("crewai", "GroundlensCrewListener"),
    ("semantic_kernel", "GroundlensFilter"),
    ("autogen", "GroundlensChecker"),
    ("autogen", "GroundlensChatCompletionClient"),
    ("autogen", "GroundlensFlaggedTermination"),
    ("providers.openai", "OpenAIProvider"),
    ("providers.anthropic", "AnthropicProvider"),
    ("providers.google", "GoogleProvider"),
]
#: the adapters whose ``**kwargs`` is the SDK client's own, documented as such
CLIENT_KWARGS = {"OpenAIProvider", "AnthropicProvider", "GoogleProvider"}


def _adapter(module: str, name: str) -> type:
    import importlib

    try:
        return getattr(importlib.import_module(f"groundlens_core.plugins.{module}"), name)
    except ImportError as exc:  # the framework is not installed here
        pytest.skip(f"{module}: {exc}")


def test_the_shell_keywords_are_the_ones_every_adapter_repeats():
    assert SHELL_KEYWORDS == (
        "name",
        "recorder",
        "embedder",
        "calibration",
        "long_context",
        "listeners",
        "tracer_provider",
        "max_traces",
        "sample_rate",
        "nodes",
        "skip_nodes",
    )
    # the one declaration adapters unpack (``**options: Unpack[ShellOptions]``) names the same options
    assert set(ShellOptions.__annotations__) == set(SHELL_KEYWORDS)
    assert set(ShellOptionsBesideName.__annotations__) == set(SHELL_KEYWORDS) - {"name"}


@pytest.mark.parametrize(("module", "name"), ADAPTERS, ids=[n for _, n in ADAPTERS])
def test_every_adapter_constructor_names_the_shell_options_with_their_defaults(module, name):
    cls = _adapter(module, name)
    assert issubclass(cls, AdapterShell)
    params = inspect.signature(cls).parameters
    shell = inspect.signature(AdapterShell.__init__).parameters
    missing = [k for k in SHELL_KEYWORDS if k not in params]
    assert missing == [], f"{name}({', '.join(params)}) does not name {missing}"
    for key in SHELL_KEYWORDS:
        if key != "name":  # an adapter may name its traces by default ("crew", "flagged-termination")
            assert params[key].default == shell[key].default, (name, key)
        assert params[key].kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    catch_all = [p.name for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
    if name in CLIENT_KWARGS:
        assert catch_all == ["kwargs"] and "SDK client" in (cls.__init__.__doc__ or "")
    else:
        assert catch_all == [], f"{name} still takes **{catch_all[0]}"
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert "tracer_provider: 'Any' = None" in text and "listeners: 'Sequence[TraceListener]' = ()" in text


def test_the_options_still_reach_the_shell():
    """Named on the adapter, each option does what it did through ``**shell``."""
    from groundlens_core.trace import Recorder

    cls = _adapter("langgraph", "GroundlensLangGraphCallback")
    recorder = Recorder("mine")
    cb = cls("named", recorder=recorder, listeners=[spy := _Spy()], max_traces=7)
    assert cb.name == "named" and cb.recorder is recorder and spy in recorder._listeners
    with pytest.raises(TypeError, match=r"GroundlensLangGraphCallback\(\) got an unexpected keyword argument 'tracer_provder'; did you mean 'tracer_provider'\?"):
        cls(tracer_provder=None)  # a misspelt option is refused in the adapter's name
    own = cls(max_traces=3, long_context="nearest")
    assert own.recorder._store.max_traces == 3 and own.long_context == "nearest"


class _Spy:
    def on_step(self, trace, step) -> None:
        pass
