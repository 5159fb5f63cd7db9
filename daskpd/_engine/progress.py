"""Progress of a computation: a bar on a terminal, plain lines in a log.

``progress`` (every public function's parameter) reads:

* ``None`` / ``True`` -- automatic: a live bar when stderr is a terminal; otherwise (a
  log file, a pipe, cron, a batch system) one line per stage, written when the stage
  ends, plus a line every ``daskpd.progress-interval`` seconds (default 30) while a
  long stage runs.  Lines carry the stage number and name, the tasks done of the
  total and the elapsed time, and contain no carriage return and no escape code.
* ``"bar"`` / ``"log"`` -- that form, whatever stderr is;
* ``False`` -- nothing.

Everything goes to stderr: stdout stays for results.
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools
import sys
import time

import dask

__all__ = ["progress_mode", "show_futures", "local_progress", "stage_label", "LINE_PREFIX"]

LINE_PREFIX = "daskpd: progress"
_STAGES = itertools.count(1)
_LABEL: contextvars.ContextVar = contextvars.ContextVar("daskpd_stage_label", default=None)


@contextlib.contextmanager
def stage_label(text: str | None):
    """Within this context, the stages' progress lines carry ``text`` after their name
    (e.g. which engine runs and what it costs); a bar gets it as a line above."""
    token = _LABEL.set(text)
    try:
        yield
    finally:
        _LABEL.reset(token)


def _labelled(name: str) -> str:
    text = _LABEL.get()
    return f"{name}; {text}" if text else name


def _header() -> None:
    text = _LABEL.get()
    if text:
        with contextlib.suppress(ValueError, OSError):
            sys.stderr.write(f"{LINE_PREFIX}: {text}\n")
            sys.stderr.flush()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def progress_mode(progress) -> str | None:
    """``"bar"``, ``"log"`` or None (nothing) for a ``progress`` argument."""
    if progress is None or progress is True:
        return "bar" if _isatty(sys.stderr) else "log"
    if isinstance(progress, str):
        if progress not in ("bar", "log", "auto"):
            raise ValueError(f"progress must be True, False, None, 'auto', 'bar' or 'log'; got {progress!r}")
        return progress_mode(None) if progress == "auto" else progress
    return progress_mode(None) if progress else None


def _interval() -> float:
    return float(dask.config.get("daskpd.progress-interval", 30.0))


def _stage_name(keys) -> str:
    from dask.utils import key_split

    names = []
    for k in keys:
        n = key_split(getattr(k, "key", k))
        if n not in names:
            names.append(n)
    return ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "") if names else "graph"


def _fmt_s(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


class _Lines:
    """The log form: a line when the stage ends and one per interval while it runs."""

    def __init__(self, name: str, stream=None):
        self.stage = next(_STAGES)
        self.name = _labelled(name)
        self.stream = stream
        self.t0 = time.perf_counter()
        self.last = self.t0

    def _write(self, text: str) -> None:
        stream = self.stream or sys.stderr
        with contextlib.suppress(ValueError, OSError):
            stream.write(f"{LINE_PREFIX} stage {self.stage} ({self.name}): {text}\n")
            stream.flush()

    def tick(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - self.last >= _interval():
            self.last = now
            pct = f" ({100 * done / total:.0f}%)" if total else ""
            self._write(f"{done:,}/{total:,} tasks{pct}, {_fmt_s(now - self.t0)}")

    def end(self, done: int, total: int, error: str | None = None) -> None:
        took = _fmt_s(time.perf_counter() - self.t0)
        if error:
            self._write(f"failed after {done:,}/{total:,} tasks, {took}: {error}")
        else:
            self._write(f"{total:,}/{total:,} tasks done in {took}")


def show_futures(futures, mode: str | None) -> None:
    """Follow distributed ``futures`` until they finish, as a bar or as lines (stderr)."""
    if mode is None or not futures:
        return
    if mode == "bar":
        from distributed import progress as dprogress

        _header()
        with contextlib.redirect_stdout(sys.stderr):  # distributed draws on stdout
            dprogress(futures)
        print(file=sys.stderr)
        return
    from distributed.diagnostics.progressbar import TextProgressBar

    lines = _Lines(_stage_name(futures))

    class _LogBar(TextProgressBar):
        def _draw_bar(self, remaining, all, **kwargs):  # noqa: A002 - distributed's name
            lines.tick(all - remaining, all)

        def _draw_stop(self, remaining=0, all=0, status="finished", exception=None, **kwargs):  # noqa: A002
            err = None
            if status == "error":
                err = str(exception).splitlines()[0][:200] if exception is not None else "error"
            lines.end(all - remaining, all, err)

    _LogBar(futures, interval="100ms", complete=True)


def local_progress(mode: str | None, objs=()):
    """A context showing the progress of dask's local scheduler (bar or lines)."""
    if mode is None:
        return contextlib.nullcontext()
    if mode == "bar":
        from dask.diagnostics import ProgressBar

        _header()
        return ProgressBar(out=sys.stderr)
    from dask.callbacks import Callback

    keys = []
    for o in objs:
        with contextlib.suppress(Exception):
            keys.extend(o.__dask_keys__() if hasattr(o, "__dask_keys__") else [])

    class _LocalLines(Callback):
        def __init__(self):
            super().__init__()
            self.lines = _Lines(_stage_name(_flatten(keys)) if keys else "local")
            self.total = self.done = 0

        def _start_state(self, dsk, state):
            self.total = sum(len(state[k]) for k in ("ready", "waiting", "running", "finished"))

        def _posttask(self, key, result, dsk, state, worker_id):
            self.done += 1
            self.lines.tick(self.done, self.total)

        def _finish(self, dsk, state, errored):
            self.lines.end(self.done, self.total, "a task raised" if errored else None)

    return _LocalLines()


def _flatten(keys):
    for k in keys:
        if isinstance(k, list):
            yield from _flatten(k)
        else:
            yield k
