"""The report's one list (`report.sections`): every table and figure a report shows is an entry of its kind of
study, under the name the file is written as, in the list's order."""

import pytest

from lbscale.report import ReportOptions, load_results
from lbscale.report.sections import FIGURES, TABLES, build
from tests.fixtures.make_results import make_study
from tests.report.make_branch import make_branch_study
from tests.report.make_tuned import make_tuned_study


@pytest.mark.parametrize("kind", ["rule", "tuned", "branch"])
def test_each_table_and_figure_is_an_entry_of_its_kind(kind, tmp_path):
    made = {"rule": lambda p: make_study(p, target=0.9, seeds=2), "tuned": make_tuned_study,
            "branch": make_branch_study}[kind](tmp_path / "res")
    built = build(load_results([made]), ReportOptions())
    tables = [t() if callable(t) else t for t in built.tables]
    names = [e.name for e in TABLES if kind in e.kinds]
    assert [t.name for t in tables] == [n for n in names if n in {t.name for t in tables}]
    figures = [e.name for e in FIGURES if kind in e.kinds]
    assert set(built.figures) <= set(figures) and built.lead in built.figures
