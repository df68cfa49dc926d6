"""The run viewer: a self-contained ``report.html`` per fill run (no network, no CDN: data, styles and script are
inline) and ``benchfill view RUN``, which serves it on 127.0.0.1 and lets review votes reach the memory bank."""

from benchfill.viewer.report import build_report, report_data, write_report

__all__ = ["build_report", "report_data", "write_report"]
