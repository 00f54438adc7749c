"""Write docs/cli.md, the command-line reference, from lbscale's Click commands: every command and group, its help,
its arguments and its options with type, default and help. Generated, so it cannot drift from the code; the test
tests/test_cli_reference.py fails when the file differs from what this script writes.

    python docs/make_cli_reference.py           # rewrite docs/cli.md (make docs does the same)
    python docs/make_cli_reference.py --check   # exit 1 if docs/cli.md is out of date
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "cli.md"
COMMAND = "python docs/make_cli_reference.py"
UNSET = getattr(click.core, "UNSET", None)  # Click >= 8.2's marker for "no default"

HEADER = f"""# Command-line reference

Generated from the Click commands in `lbscale/cli.py` by `{COMMAND}` (or `make docs`); do not edit by hand.
`tests/test_cli_reference.py` fails when this page and the code disagree. Every command also takes `--help`.
How the commands fit together, with examples: the [README](../README.md) and the guides it links
([prepare](prepare.md), [train](train.md), [sweep](sweep.md), [report](report.md)).
"""


def _cell(text: str) -> str:
    """Text for one Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _help(text: str | None) -> str:
    """A command's help as Markdown: paragraphs joined into lines; Click's `\\b` blocks kept verbatim as text."""
    out = []
    for para in inspect.cleandoc(text or "").split("\n\n"):
        if para.startswith("\b"):
            out.append("```\n" + para[1:].strip("\n") + "\n```")
        elif para.strip():
            out.append(" ".join(para.split()))
    return "\n\n".join(out)


def _type(param: click.Parameter) -> str:
    if isinstance(param, click.Option) and param.is_flag:
        return "flag"
    kind = param.type
    if isinstance(kind, click.Choice):
        return " | ".join(f"`{c}`" for c in kind.choices)
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        return f"{kind.name} {kind._describe_range()}"
    bounds = [f"{'>' if getattr(kind, 'lo_open', True) else '>='} {kind.lo:g}" if getattr(kind, "lo", None)
              is not None else "", f"{'<' if getattr(kind, 'hi_open', True) else '<='} {kind.hi:g}"
              if getattr(kind, "hi", None) is not None else ""]
    return " ".join([kind.name, *(b for b in bounds if b)])


def _default(param: click.Option) -> str:
    if isinstance(param.show_default, str):
        return param.show_default
    default = param.default
    if callable(default):
        return "(computed)"
    plain_flag_off = param.is_flag and not param.secondary_opts and default is False
    if default is None or default is UNSET or default == () or plain_flag_off:
        return ""
    if param.is_flag and param.secondary_opts:
        return param.opts[0] if default else param.secondary_opts[0]
    if isinstance(default, (list, tuple)):
        return ", ".join(map(str, default))
    return str(default)


def _flags(param: click.Option) -> str:
    return " / ".join(f"`{f}`" for f in [*param.opts, *param.secondary_opts])


def _command(cmd: click.Command, path: list[str], ctx: click.Context) -> list[str]:
    name = " ".join(path)
    lines = [f"{'#' * min(len(path), 4)} `{name}`", ""]
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    lines += ["```", f"{name} {usage}".rstrip(), "```", ""]
    if cmd.help:
        lines += [_help(cmd.help), ""]
    args = [p for p in cmd.params if isinstance(p, click.Argument)]
    if args:
        lines += ["| Argument | Type | Required |", "|---|---|---|"]
        lines += [f"| `{p.human_readable_name}` | {_cell(_type(p))} | {'yes' if p.required else 'no'} |"
                  for p in args]
        lines.append("")
    opts = [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden and p.name != "help"]
    if opts:
        lines += ["| Option | Type | Default | Help |", "|---|---|---|---|"]
        lines += [f"| {_flags(p)} | {_cell(_type(p))} | {_cell(_default(p))} | {_cell(p.help or '')} |"
                  for p in opts]
        lines.append("")
    if isinstance(cmd, click.Group):
        for sub_name, sub in cmd.commands.items():
            if not sub.hidden:
                lines += _command(sub, [*path, sub_name], click.Context(sub, info_name=sub_name, parent=ctx))
    return lines


def render() -> str:
    """docs/cli.md's text for the commands as they are in the code."""
    from lbscale.cli import cli

    ctx = click.Context(cli, info_name="lbscale")
    return HEADER + "\n" + "\n".join(_command(cli, ["lbscale"], ctx)).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if TARGET.exists() and TARGET.read_text() == text:
            return 0
        print(f"{TARGET.relative_to(ROOT)} is out of date: run {COMMAND}", file=sys.stderr)
        return 1
    TARGET.write_text(text)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
