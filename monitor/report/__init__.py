"""Reports a person can read: one folder per inspection (figures + index.html + the result
JSON) and a timeline for backfills. matplotlib (Agg, no display) loads only when a report is
drawn, so importing this package costs nothing on the CLI's fast paths.

Public API (called by ``inspect --report``, ``backfill --report`` and the daemon's
``report_dir``)::

    write_inspection_report(result, out_dir, *, before_raw=None, after_raw=None, before=None,
                            after=None, sensors_file=None, links_file=None) -> Path
    write_backfill_report(results, out_dir) -> Path

``result`` is a :class:`monitor.result.InspectionResult` or its JSON object (read back with
``InspectionResult.from_dict``; a JSON object is written beside the report as delivered).

A figure that fails to draw is logged and named in the page; the only exception that leaves
these functions is :class:`ReportWriteError` (the folder cannot be written). Callers that
deliver alerts still wrap the call, so a report can never hold an alert back.
"""
from monitor.report.backfill import write_backfill_report
from monitor.report.errors import ReportError, ReportInputError, ReportWriteError
from monitor.report.inspection import write_inspection_report

__all__ = [
    "ReportError",
    "ReportInputError",
    "ReportWriteError",
    "write_backfill_report",
    "write_inspection_report",
]
