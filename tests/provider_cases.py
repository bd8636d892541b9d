"""What the provider tests share: the texts they send, and the check of an instrumented call's step.

The contract suite (tests/test_provider_contract.py) and each SDK's own tests
(tests/test_<sdk>_provider.py) ask the same questions of every SDK.
"""

from __future__ import annotations

from typing import Any

CONTEXT = ("The Aurora-7 battery pack stores 12 kWh and charges fully in 4 hours from a 240 V outlet. "
           "It carries a 10-year warranty.")
QUESTION = "How long does the Aurora-7 take to charge?"
GROUNDED = "It charges fully in 4 hours from a 240 V outlet; the 12 kWh pack has a 10-year warranty."
FLAGGED = "The Aurora-7 takes about 30 minutes to charge with the included solar panel."
WEATHER = "Weather in Oslo: 4 degrees Celsius, light rain, wind 20 km/h from the north."
WEATHER_QUESTION = "What is the weather in Oslo?"
BOT = "weather-bot"  # the trace name the instrumented weather conversation is recorded under


def sent(server: Any, i: int = -1) -> dict:
    """The JSON body of the ``i``-th request the wire server got (the last by default)."""
    return server.requests[i].json


def weather_step(guard: Any, *, framework: str, node: str, response: str, context: list[tuple[str, str]]) -> Any:
    """The one step an instrumented client recorded for the weather conversation (its tool result as
    context), checked for what every SDK records alike; returns it for the SDK's own checks."""
    trace = guard.get_trace()
    assert trace.name == BOT and trace.framework == framework
    step = trace.steps[0]
    assert step.kind == "llm" and step.method == "sgi" and step.node == node
    assert step.question == WEATHER_QUESTION and step.response == response
    assert [(c.source, c.text) for c in step.context] == context
    return step
