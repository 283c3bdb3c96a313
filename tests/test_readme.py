"""The README's examples work as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import collc

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```(\w*)\n(.*?)```", README, flags=re.S)


def test_readme_starts_with_the_two_commands() -> None:
    commands = [body.strip() for lang, body in BLOCKS[:2]]
    assert commands[0].startswith("pip install . && collc ")
    assert commands[1] == "pip install -e '.[test,torch]' && python -m pytest -q -n 2 --dist loadfile"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -e '.[test,torch]'" in ci and "python -m pytest -q -n 2 --dist loadfile" in ci


def test_ci_runs_in_a_fresh_venv_of_its_own() -> None:
    """CI makes its own venv, without the system's packages, and runs the test command inside it."""
    ci = (ROOT / ".ci" / "run").read_text()
    lines = [line.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    make = next(i for i, line in enumerate(lines) if " -m venv " in line)
    activate = next(i for i, line in enumerate(lines) if "/bin/activate" in line)
    install = next(i for i, line in enumerate(lines) if "pip install" in line)
    assert make < activate < install
    assert "--system-site-packages" not in ci
    assert any("mktemp" in line for line in lines[:make]), "the venv is made outside the checkout"


@pytest.mark.parametrize("p", [2, 4, 6, 8, 10, 16, 32])
def test_readme_coll_program_verifies(p: int) -> None:
    program = next(body for _, body in BLOCKS if body.startswith("algorithm "))
    inst = collc.parse(program, "README.coll").instantiate(p=p)
    assert inst.verify().ok
    assert inst.run(count=5 * p + 1, dtype="int64").wrong == 0


def test_readme_python_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    code = next(body for lang, body in BLOCKS if lang == "python")
    monkeypatch.chdir(ROOT)
    exec(compile(code, "README.md", "exec"), {})
