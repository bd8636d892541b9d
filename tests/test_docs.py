"""The README is a guide that links into the docs, and examples/README.md names every example with its extra."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def relative_links(md: Path) -> list[str]:
    return [t for t in LINK.findall(md.read_text(encoding="utf-8")) if "://" not in t]


def test_readme_is_short_with_install_near_the_top():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, len(lines)
    assert any("pip install" in line for line in lines[:40])
    assert any("groundlens-core" in line for line in lines[:40])


def test_install_lines_put_the_cpu_index_first_clone_and_constrain_every_route():
    """The README's and the install page's lines: torch's CPU build from its own index first (a bare
    torch pulls CUDA wheels), a clone step, ``-c constraints.txt`` on the checkout and the wheel route,
    and a wheel named by pattern (its version changes)."""
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
        if "==" in line
    )
    source = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]["Source"]
    for name in ("README.md", "docs/install.md"):
        text = (ROOT / name).read_text(encoding="utf-8")
        pip = [line.split("#")[0].strip() for line in text.splitlines() if line.startswith("pip install")]
        torch = [line for line in pip if line.split()[2].startswith("torch")]
        assert torch[0] == f"pip install torch=={pins['torch']} --index-url https://download.pytorch.org/whl/cpu", name
        assert all("--index-url https://download.pytorch.org/whl/cpu" in line for line in torch), name
        assert f"git clone {source} && cd groundlens" in text, name
        ours = [line for line in pip if "[langgraph]" in line]
        wheel = [line for line in ours if ".whl" in line]
        assert wheel == ['pip install -c constraints.txt "$(echo dist/groundlens_core-*.whl)[langgraph]"'], name
        assert ours[0].startswith("pip install -c constraints.txt "), name
        assert not re.search(r"groundlens_core-\d", text), name  # no version in a wheel's name


def test_readme_and_examples_readme_links_exist():
    for md in (ROOT / "README.md", ROOT / "examples" / "README.md"):
        missing = [t for t in relative_links(md) if not (md.parent / t).exists()]
        assert not missing, f"{md.name}: {missing}"


def test_examples_readme_names_every_example_with_a_real_extra():
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    )
    rows = {}
    for line in (ROOT / "examples" / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = re.search(r"`(\w+\.py)`", cells[0]) if len(cells) >= 3 else None
        if name:
            rows[name.group(1)] = cells[1].strip("`").split(",")
    examples = {p.name for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_")}  # _*.py: shared helpers
    assert examples and set(rows) == examples, (sorted(examples - set(rows)), sorted(set(rows) - examples))
    unknown = {name: extra for name, needed in rows.items() for extra in needed if extra not in extras}
    assert not unknown, unknown
