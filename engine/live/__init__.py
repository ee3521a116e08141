"""The live profile's statistics: pure NumPy, no I/O, no clock, no state.

* :mod:`engine.live.residual_shift`: the short-window statistic (hour-of-day profile and
  common mode removed, local level shift per sensor, ``z``);
* :mod:`engine.live.calibration`: its p-value against a site's own history (Pareto tail)
  and the alert level from a target mean time between false incidents.
"""
