"""Report errors. Messages name the problem and the fix.

Drawing never raises into alert delivery: each figure's failure is caught, logged and listed
in the report's index.html. Only :class:`ReportWriteError` (the report folder itself cannot be
written) leaves ``write_inspection_report``/``write_backfill_report``.
"""
from __future__ import annotations


class ReportError(Exception):
    """Base class of report errors."""


class ReportInputError(ReportError, ValueError):
    """The inputs cannot make this figure (missing scores, bad coordinates file, ...)."""


class ReportWriteError(ReportError, OSError):
    """The report folder or a file in it cannot be written."""
