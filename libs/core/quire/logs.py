"""Structured logs: one JSON object per line, joinable with traces.

Every line carries the service, the level, the logger and the message, and,
when there is one, the current span's ``trace_id`` and ``span_id`` (the same
hex ids the traces carry), the ``job`` and the ``tenant``. The job and the
tenant come from the call's ``extra`` (``log.info("job accepted",
extra={"job": ident, "tenant": tenant})``), else from the current span's
``quire.job`` / ``quire.tenant`` attributes, so a line logged inside a job's
span needs nothing more. ``grep`` for one job id then shows every service's
lines of that job, all with the job's trace id.

Logs carry ids, digests, counts and reason codes; never document text, file
names or key material. Exception text and tracebacks may quote what a parser
read, so an exception is logged as its type only (``error``).

``QUIRE_LOG_FORMAT`` chooses ``json`` (the default) or ``text``, a line per
record for people reading a terminal, with the same fields.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import IO, Annotated, Any, Literal

from opentelemetry import trace
from pydantic import BeforeValidator
from pythonjsonlogger.core import RESERVED_ATTRS, merge_record_extra
from pythonjsonlogger.json import JsonFormatter

__all__ = [
    "FORMATS",
    "JobContext",
    "JsonLines",
    "TextLines",
    "LogFormat",
    "log_handler",
]

FORMATS = ("json", "text")
QUIET_LOGGERS = ("httpx", "httpcore", "aiohttp.access")
"""Libraries whose INFO lines carry whole URLs, path and query (a callback's
``?token=``, a source record's key, a gateway request's path): only their
warnings are logged."""
CONTEXT_FIELDS = ("trace_id", "span_id", "job", "tenant")
"""Added to a line when known; omitted when empty."""
_SPAN_ATTRIBUTES = {"job": "quire.job", "tenant": "quire.tenant"}
_OWN = {"service", "error", *CONTEXT_FIELDS}


def _lower(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


LogFormat = Annotated[Literal["json", "text"], BeforeValidator(_lower)]
"""A process's ``log_format`` setting: ``json`` (one object per line) or
``text`` (for people), in any case."""


def log_handler(service: str, chosen: str, stream: IO[str]) -> logging.Handler:
    """A handler writing ``service``'s records to ``stream`` in the chosen format,
    each record given its trace and job context first."""
    handler = logging.StreamHandler(stream)
    handler.addFilter(JobContext(service))
    handler.setFormatter(JsonLines() if chosen == "json" else TextLines())
    return handler


def _job_id(value: object) -> str:
    """A job's id: ``jobs/{id}`` (a task's or event's ``job``) logs as ``{id}``,
    as the spans carry it, so one filter finds both."""
    text = "" if value is None else str(value)
    return text.removeprefix("jobs/")


class JobContext(logging.Filter):
    """Adds ``service``, ``trace_id``/``span_id`` and ``job``/``tenant`` to each
    record; passes every record. Attached to the handler, so records of every
    logger (the service's, the libraries') get it."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self._service = service

    def filter(self, record: logging.LogRecord) -> bool:
        record.service = self._service
        span = trace.get_current_span()
        context = span.get_span_context()
        if context.is_valid:
            record.trace_id = f"{context.trace_id:032x}"
            record.span_id = f"{context.span_id:016x}"
        # An SDK span exposes its attributes; a non-recording one does not.
        attributes = getattr(span, "attributes", None) or {}
        for field, attribute in _SPAN_ATTRIBUTES.items():
            given = getattr(record, field, None)
            value = given if given else attributes.get(attribute, "")
            setattr(record, field, _job_id(value) if field == "job" else str(value or ""))
        return True


def _error_type(exc_info: object) -> str:
    """The logged exception's type, never its text nor its traceback."""
    if not isinstance(exc_info, tuple) or not exc_info or exc_info[0] is None:
        return ""
    return str(exc_info[0].__name__)


def _utc_time(record: logging.LogRecord) -> str:
    """RFC 3339, UTC, milliseconds."""
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonLines(JsonFormatter):
    """One JSON object per line: ``time``, ``level``, ``service``, ``logger``,
    ``message``, then ``trace_id``, ``span_id``, ``job``, ``tenant`` and
    ``error`` when known, then any other field the call passed in ``extra``."""

    def __init__(self) -> None:
        super().__init__(reserved_attrs=[*RESERVED_ATTRS, *_OWN])

    def format(self, record: logging.LogRecord) -> str:
        # The base class would put a formatted traceback under ``exc_info``
        # (or reuse one another formatter cached) and the stack under
        # ``stack_info``, on many lines: the exception's type alone goes out.
        exc_info, exc_text, stack_info = record.exc_info, record.exc_text, record.stack_info
        record.exc_text = None
        record.stack_info = None
        record.exc_info = None
        try:
            record.error = _error_type(exc_info) or getattr(record, "error", "")
            return super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = exc_info, exc_text, stack_info

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        log_data["time"] = _utc_time(record)
        log_data["level"] = record.levelname
        log_data["service"] = getattr(record, "service", "")
        log_data["logger"] = record.name
        log_data["message"] = record.message
        for field in (*CONTEXT_FIELDS, "error"):
            value = getattr(record, field, "")
            if value:
                log_data[field] = value
        for key, value in message_dict.items():
            if key not in log_data:
                log_data[key] = value
        merge_record_extra(record, log_data, reserved=self._skip_fields)


class TextLines(logging.Formatter):
    """``time service LEVEL logger: message [job=… tenant=… trace=… error=…]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(service)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(self._prepared(record))
        context = [
            f"{label}={getattr(record, field, '')}"
            for label, field in (
                ("job", "job"),
                ("tenant", "tenant"),
                ("trace", "trace_id"),
                ("span", "span_id"),
            )
            if getattr(record, field, "")
        ]
        error = _error_type(record.exc_info)
        if error:
            context.append(f"error={error}")
        return f"{line} [{' '.join(context)}]" if context else line

    def _prepared(self, record: logging.LogRecord) -> logging.LogRecord:
        record.message = record.getMessage()
        record.asctime = self.formatTime(record, self.datefmt)
        if not hasattr(record, "service"):
            record.service = ""
        return record
