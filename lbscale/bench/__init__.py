"""Measurements of the machine rather than of a model: `lbscale bench ...` (all-reduce cost for the scaling model)."""
