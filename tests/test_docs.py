"""The docs describe the tool as it is: history lives in CHANGELOG.md and dated figures in docs/benchmarks.md; no page
outgrows what a reader takes in; the README stays a door, not a log."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
DATED = {"benchmarks.md"}  # the measured figures, each with its date and command
LONG = {"cli.md", "benchmarks.md"}  # generated from the code; the table of measured figures
PAGE_LINES, README_LINES, README_DATES = 400, 150, 3


def test_no_dates_in_the_docs_but_the_benchmarks():
    found = [f"docs/{p.name}:{i}: {line.strip()[:80]}" for p in sorted((ROOT / "docs").glob("*.md"))
             if p.name not in DATED for i, line in enumerate(p.read_text().splitlines(), 1) if DATE.search(line)]
    assert not found, "dates belong in CHANGELOG.md or docs/benchmarks.md:\n" + "\n".join(found)


def test_no_dates_in_the_codes_docstrings_and_comments():
    found = []
    for path in sorted((ROOT / "lbscale").rglob("*.py")):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node) or ""
                if DATE.search(doc):
                    found.append(f"{path.relative_to(ROOT)}: docstring of {getattr(node, 'name', 'the module')}")
        found += [f"{path.relative_to(ROOT)}:{i}" for i, line in enumerate(text.splitlines(), 1)
                  if "#" in line and DATE.search(line.split("#", 1)[1])]
    assert not found, "incident histories go to commit messages and CHANGELOG.md:\n" + "\n".join(found)


def test_no_page_outgrows_a_reader():
    long = [f"docs/{p.name}: {n} lines" for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in LONG
            and (n := len(p.read_text().splitlines())) > PAGE_LINES]
    assert not long, f"pages over {PAGE_LINES} lines (split them by purpose):\n" + "\n".join(long)


def test_the_readme_is_a_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_LINES, len(text.splitlines())
    assert len(DATE.findall(text)) <= README_DATES, DATE.findall(text)
    assert (ROOT / "CHANGELOG.md").is_file() and "CHANGELOG.md" in text
