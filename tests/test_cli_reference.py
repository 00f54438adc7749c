"""docs/cli.md is generated from the Click commands (docs/make_cli_reference.py): it names every command and option
the code has, so a change to the CLI that is not regenerated fails here with the command that fixes it."""

import importlib.util
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
FIX = "python docs/make_cli_reference.py (or make docs)"


def _generator():
    spec = importlib.util.spec_from_file_location("make_cli_reference", ROOT / "docs" / "make_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_current():
    expected = _generator().render()
    page = ROOT / "docs" / "cli.md"
    assert page.exists(), f"docs/cli.md is missing: write it with {FIX}"
    assert page.read_text() == expected, f"docs/cli.md differs from the Click commands: regenerate it with {FIX}"


def test_every_command_and_option_is_in_it():
    from lbscale.cli import cli

    text = _generator().render()

    def walk(cmd, path):
        assert f"`{' '.join(path)}`" in text, path
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden and p.name != "help":
                assert f"`{p.opts[0]}`" in text, (path, p.opts)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(cli, ["lbscale"])
