"""Run code in a fresh interpreter where an optional dependency is not installed, to check that our
modules still import and that using them says which extra to install."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_PRELUDE = '''
import sys

class _Block:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in {blocked!r}):
            raise ImportError("blocked for the test: " + name)

sys.meta_path.insert(0, _Block())

def hint(make):
    """Call ``make``; the ImportError it raises is printed as a ``HINT:`` line."""
    try:
        make()
    except ImportError as exc:
        print("HINT:", exc)
'''


def run_without(blocked: tuple[str, ...], code: str) -> str:
    """The output of ``code`` run where the packages ``blocked`` (and their submodules) cannot be
    imported; ``code`` may call ``hint(make)``. Fails the test when the code fails."""
    script = textwrap.dedent(_PRELUDE).format(blocked=blocked) + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def hints(output: str) -> list[str]:
    """The ``HINT:`` lines of ``run_without``'s output."""
    return [line for line in output.splitlines() if line.startswith("HINT:")]
