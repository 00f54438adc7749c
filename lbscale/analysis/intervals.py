"""The level of every interval lbscale reports (the noise scale's Fieller interval, the steps model's profile
likelihood, the t-intervals, the tables and the verdict that name it): one number, here at the lowest layer so
that analysis/ and report/ import the same one; with it the one two-sided t quantile they all take."""

LEVEL = 0.9


def t_quantile(dof: int, level: float) -> float:
    """The two-sided Student t quantile at `level` with `dof` degrees of freedom."""
    from scipy.special import stdtrit

    return float(stdtrit(dof, 0.5 + level / 2))
