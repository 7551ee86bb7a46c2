"""What the docs say about the CI commands stays true: the exit-code tables list exactly the codes
the commands use, and the GitHub Actions and GitLab CI examples are valid YAML whose onnx-reducer
command lines parse."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from reducer_cli import client_exit
from reducer_cli.args import build_parser

ROOT = Path(__file__).resolve().parents[2]
CI_DOC = (ROOT / "docs" / "ci.md").read_text()
CODES = {value for name, value in vars(client_exit).items() if name.startswith("EXIT_")}


def table_codes(text: str) -> set[int]:
    return {int(code) for code in re.findall(r"^\| (\d+) \|", text, re.MULTILINE)}


def test_exit_code_tables_list_every_code() -> None:
    assert table_codes(CI_DOC) == CODES
    readme = (ROOT / "README.md").read_text()
    ci_section = readme[readme.index("**From CI (and scripts).**") : readme.index("Routes (OpenAPI")]
    assert table_codes(ci_section) == CODES
    assert "docs/ci.md" in ci_section


def yaml_examples() -> list[Any]:
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", CI_DOC, re.DOTALL)]


def submit_commands(node: Any) -> list[str]:
    """Every ``onnx-reducer ...`` command in a parsed YAML document's strings."""
    if isinstance(node, dict):
        return [c for value in node.values() for c in submit_commands(value)]
    if isinstance(node, list):
        return [c for value in node for c in submit_commands(value)]
    if isinstance(node, str) and "onnx-reducer submit" in node:
        text = node.replace("\\\n", " ")
        return [text[text.index("onnx-reducer submit") :].split(" > ", 1)[0]]
    return []


def test_ci_examples_are_yaml_and_their_commands_parse() -> None:
    github, gitlab = yaml_examples()
    assert "GITHUB_STEP_SUMMARY" in str(github) and "actions/upload-artifact@v4" in str(github)
    assert gitlab["reduce-model"]["allow_failure"]["exit_codes"] == [3, 7, 8]
    commands = submit_commands(github) + submit_commands(gitlab)
    assert len(commands) == 2
    for command in commands:
        ns = build_parser().parse_args(shlex.split(command)[1:])
        assert (ns.command, ns.wait, ns.json, ns.output_dir) == ("submit", True, True, "reduced")
