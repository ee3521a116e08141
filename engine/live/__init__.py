"""The live profile's statistics: no I/O, no clock, no state.

* :mod:`engine.live.residual_shift`: the short-window level statistic (hour-of-day profile
  and common mode removed, local level shift per sensor, ``z``);
* :mod:`engine.live.engine_power`: the engine part, CV-aggregation's validation power on the
  same residual windows, and the weighted Bonferroni combination of the two parts;
* :mod:`engine.live.calibration`: a statistic's p-value against a site's own history (Pareto
  tail) and the alert level from a target mean time between false incidents;
* :mod:`engine.live.onset` and :mod:`engine.live.reference`: an incident's onset estimate
  and its frozen reference.
"""
