"""The level of every interval lbscale reports (the noise scale's Fieller interval, the steps model's profile
likelihood, the t-intervals, the tables and the verdict that name it): one number, here at the lowest layer so
that analysis/ and report/ import the same one."""

LEVEL = 0.9
