"""`lbscale report`: the papers' tables and figures from one or more sweeps, with published numbers beside them.

`load_results` (the Study as DataFrames) is the entry point for notebooks; `write_report` writes the tables
(Markdown, LaTeX, CSV, one self-contained HTML page) and the figures (PNG and PDF) into a fresh directory, the
verdict and its figure first. A tuned study (a hyperparameter search per batch) is reported by its best trial per
batch, the optimal LR's exponent and the critical batch (`report.tuned`); a rule-based one by the papers' tables.

The command's parts, each in its module: `options` (what is asked: metric, targets), `published` (the published
tables), `analysed` (a study's analysis, computed once), `sections` (the one list of tables and figures),
`verdict` (its lines), `write` (the folder and the pages), `critical_batch` (the fit's views for other commands),
`branch_study` (a branch study's folder, `lbscale branch`'s answer).
"""

from lbscale.report.critical_batch import tuned_critical_batch
from lbscale.report.load import Study, load_results
from lbscale.report.options import FORMATS, ReportOptions, parse_targets, tuned_study
from lbscale.report.published import published, published_tables
from lbscale.report.verdict import headline
from lbscale.report.write import write_report

__all__ = ["load_results", "write_report", "published", "published_tables", "Study", "FORMATS", "ReportOptions",
           "parse_targets", "tuned_study", "tuned_critical_batch", "headline"]
