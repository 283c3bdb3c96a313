"""docs/tutorial.md works as written: its program and test file are the ones in examples/tutorial/,
and every command runs with the stated result.

The commands are the lines starting with ``$ `` in its ```console blocks; the lines after a
command, up to the next command, are its output. A command that ends with the comment
``# exits with code N`` must exit with N, every other one with 0. Shown output is compared with
the start of the actual output (stdout and stderr together), line by line, trailing spaces
ignored; a line ``...`` stands for any number of lines and ``…`` inside a line for any text. The
comment ``<!-- output: sample -->`` before a block means its output is only an example (timings,
ranks printing in any order) and is not compared.

The commands run in a temporary folder holding a copy of examples/tutorial/, one block after
another (a block's commands in order, in one shell session), with stdin closed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorial.md"
FOLDER = ROOT / "examples" / "tutorial"
PROGRAM = FOLDER / "bidir_ring_allreduce.coll"
TESTS = FOLDER / "test_bidir_ring_allreduce.py"
TIMEOUT = 300  # seconds for one block
_EXIT = re.compile(r"\s+# exits with code (\d+)$")


@dataclass
class Command:
    text: str
    exit_code: int
    output: list[str]


@dataclass
class Block:
    line: int
    commands: list[Command]
    compare: bool

    @property
    def name(self) -> str:
        return f"tutorial.md:{self.line}"


def blocks() -> list[Block]:
    lines = TUTORIAL.read_text().splitlines()
    found = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        commands: list[Command] = []
        for line in lines[i + 1 : end]:
            if line.startswith("$ "):
                text = line[2:]
                match = _EXIT.search(text)
                code = int(match.group(1)) if match else 0
                commands.append(Command(text[: match.start()] if match else text, code, []))
            else:
                assert commands, f"tutorial.md:{i + 1}: output before the first command"
                commands[-1].output.append(line.rstrip())
        assert commands, f"tutorial.md:{i + 1}: a console block without commands"
        found.append(Block(i + 1, commands, before != "<!-- output: sample -->"))
        i = end + 1
    return found


def coll_blocks() -> list[str]:
    return re.findall(r"```coll\n(.*?)```", TUTORIAL.read_text(), flags=re.S)


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(), flags=re.S)


def output_matches(shown: list[str], actual: list[str]) -> bool:
    """Every shown line appears in ``actual`` in order; ``...`` skips lines, ``…`` any text in a line."""
    pos = 0
    gap = False
    for line in shown:
        if line.strip() == "...":
            gap = True
            continue
        pattern = re.compile(".*?".join(re.escape(part) for part in line.split("…")))
        while pos < len(actual) and not pattern.fullmatch(actual[pos]):
            if not gap:
                return False
            pos += 1
        if pos == len(actual):
            return False
        pos += 1
        gap = False
    return True


BLOCKS = blocks()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tutorial")
    shutil.copytree(FOLDER, root / "examples" / "tutorial", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_the_program_is_the_example_file() -> None:
    programs = coll_blocks()
    assert programs, "no ```coll block in the tutorial"
    assert programs[-1] == PROGRAM.read_text(), f"the last ```coll block of the tutorial differs from {PROGRAM}"


def test_the_property_tests_are_the_example_file() -> None:
    assert TESTS.read_text() in python_blocks(), f"no ```python block of the tutorial equals {TESTS}"


def test_the_tutorial_has_commands() -> None:
    commands = [c.text for b in BLOCKS for c in b.commands]
    for needle in ("collc check", "collc show", "pytest", "collc compile", "--backend mpi", "collc sim", "mpiexec"):
        assert any(needle in c for c in commands), needle
    assert any(c.exit_code != 0 for b in BLOCKS for c in b.commands), "the deliberate mistake"


def test_output_matching() -> None:
    assert output_matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert not output_matches(["a", "d"], ["a", "b", "d"])
    assert output_matches(["# x: … s"], ["# x: 0.4 s"])
    assert not output_matches(["a", "b"], ["b", "a"])


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_block(block: Block, workspace: Path) -> None:
    # `python` and `collc` are this interpreter's, whatever PATH says; pytest's width is 80 columns
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "COLUMNS": "80", "TERM": "dumb"}
    for name in ("COLLC_REGEN_GOLDEN", "PYTEST_ADDOPTS"):
        env.pop(name, None)
    for command in block.commands:
        proc = subprocess.run(
            ["bash", "-c", command.text],
            cwd=workspace,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        where = f"{block.name}: $ {command.text}"
        assert proc.returncode == command.exit_code, f"{where}: exit code {proc.returncode}\n{proc.stdout[-4000:]}"
        if block.compare and command.output:
            actual = [line.rstrip() for line in proc.stdout.splitlines()]
            assert output_matches(command.output, actual), (
                f"{where}: the output differs from the tutorial's\n--- shown\n"
                + "\n".join(command.output)
                + "\n--- actual\n"
                + proc.stdout[-4000:]
            )
