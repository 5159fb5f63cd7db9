"""Progress of a computation: a bar on a terminal, plain lines in a log.

The setting is a context, not an argument passed down: every public function (its
``progress`` parameter), the job's computation and the command line enter
:func:`reporting` once, and the engine's computations (:mod:`.scheduler`) show their
progress as :func:`current` says.  Outside any such context nothing is shown, and the
tasks of a graph (on dask's threads or on the workers) never show anything: progress
is the driver's.  A thread started inside a reported call does not see its setting
(run its work in ``contextvars.copy_context().run`` to report from it).

``progress`` (every public function's parameter) reads:

* ``None`` -- the enclosing call's setting (a public function called inside another, or
  inside a job); automatic when outermost;
* ``True`` -- automatic: a live bar when stderr is a terminal, labelled with
  its stage (``daskpd 2/3 fit trees [#####    ]  50% Completed | 1.2s``; a finished
  stage keeps its line); otherwise (a log file, a pipe, cron, a batch system) one line
  per stage, written when the stage ends, plus a line every
  ``daskpd.progress-interval`` seconds (default 30) while a long stage runs.  Lines
  carry the stage number and name, the tasks done of the total and the elapsed time,
  and contain no carriage return and no escape code;
* ``"bar"`` / ``"log"`` -- that form, whatever stderr is;
* ``False`` -- nothing.

Stages are numbered per call (:func:`progress_call`, entered by every public function):
"stage 2/3 (fit trees)" when the call declared its stages (:func:`plan_stages`: the
model-free pipeline's sample, fit trees, scan and finish), "stage 2 (quantiles)"
otherwise, the name then taken from the graph's keys.

Everything goes to stderr: stdout stays for results.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys
import time

from . import config

__all__ = ["progress_mode", "reporting", "current", "show_futures", "local_progress", "LINE_PREFIX",
           "progress_call", "plan_stages", "stage", "stage_label"]

LINE_PREFIX = "daskpd: progress"

#: how the computations of the running call show their progress: "bar", "log" or None
#: (nothing); unset outside any call (:func:`reporting`)
_MODE: contextvars.ContextVar = contextvars.ContextVar("daskpd_progress_mode")

#: the stages of the public call being run (None: outside any call)
_CALL: contextvars.ContextVar = contextvars.ContextVar("daskpd_progress_call", default=None)

#: stage names for the engine's graph key prefixes (a stage not named by :func:`stage`)
_KEY_NAMES = {"daskpd-sample": "sample", "daskpd-fit": "fit trees", "daskpd-strat": "scan and finish",
              "daskpd-summary": "summary", "daskpd-quantiles": "quantiles"}


class _Stages:
    """One call's stages: numbered from 1, out of the planned ones when known."""

    def __init__(self):
        self.n = 0
        self.planned: list[str] = []
        self.name: str | None = None  # the name of the stage being run (:func:`stage`)

    def next(self, fallback: str) -> tuple[str, str]:
        """(number, name) of the next display: "2/3" or "2"."""
        self.n += 1
        name = self.name or fallback
        if self.planned:
            return f"{self.n}/{max(self.n, len(self.planned))}", name
        return str(self.n), name


@contextlib.contextmanager
def progress_call():
    """The stages of one public call, numbered from 1; a call made inside another (a
    public function calling one) continues the outer numbering."""
    if _CALL.get() is not None:
        yield
        return
    token = _CALL.set(_Stages())
    try:
        yield
    finally:
        _CALL.reset(token)


def plan_stages(*names: str) -> None:
    """Declare the stages the current call will run (their count is the "of m"); a
    stage run beyond them (a sample drawn again) raises the count."""
    call = _CALL.get()
    if call is not None:
        call.planned = [*call.planned[:call.n], *names] if call.n else list(names)


@contextlib.contextmanager
def stage(name: str):
    """Name the progress shown inside (every display inside is one stage)."""
    call = _CALL.get()
    if call is None:
        yield
        return
    before, call.name = call.name, name
    try:
        yield
    finally:
        call.name = before


def _label(fallback: str) -> tuple[str, str]:
    call = _CALL.get()
    if call is None:  # outside a public call (an engine function called directly)
        call = _Stages()
    number, name = call.next(fallback)
    text = _NOTE.get()
    return number, (f"{name}; {text}" if text else name)


#: a note the stages started within :func:`stage_label` carry after their name
_NOTE: contextvars.ContextVar = contextvars.ContextVar("daskpd_stage_note", default=None)


@contextlib.contextmanager
def stage_label(text: str | None):
    """Within this context, the stages' progress lines (and bars) carry ``text`` after
    their name (e.g. which engine runs and what it costs)."""
    token = _NOTE.set(text)
    try:
        yield
    finally:
        _NOTE.reset(token)


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


_UNSET = object()


@contextlib.contextmanager
def reporting(progress=None):
    """Within this context the computations show their progress as ``progress`` says
    (:func:`progress_mode`); ``None`` keeps the enclosing context's setting (automatic
    outside any).  The setting before is back on exit, an exception's too."""
    if progress is None and _MODE.get(_UNSET) is not _UNSET:
        yield
        return
    token = _MODE.set(progress_mode(progress))
    try:
        yield
    finally:
        _MODE.reset(token)


def current() -> str | None:
    """``"bar"``, ``"log"`` or None: how the computation about to run shows its progress
    (None outside :func:`reporting`, e.g. in a task on a worker or on dask's threads)."""
    return _MODE.get(None)


def _interval() -> float:
    return float(config.get("progress-interval"))


def _stage_name(keys) -> str:
    from dask.utils import key_split

    names = []
    for k in keys:
        n = key_split(getattr(k, "key", k))
        n = next((v for p, v in _KEY_NAMES.items() if n.startswith(p)), n.removeprefix("daskpd-"))
        if n not in names:
            names.append(n)
    return ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "") if names else "graph"


def _bar_text(number: str, name: str, frac: float, elapsed: float, width: int = 30) -> str:
    from dask.utils import format_time

    return (f"\rdaskpd {number} {name} [{'#' * int(width * frac):<{width}}] {int(100 * frac):3d}% Completed | "
            f"{format_time(elapsed):<10}")


def _fmt_s(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


class _Lines:
    """The log form: a line when the stage ends and one per interval while it runs."""

    def __init__(self, name: str, stream=None):
        self.stage, self.name = _label(name)
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
    from distributed.diagnostics.progressbar import TextProgressBar

    if mode == "bar":
        number, name = _label(_stage_name(futures))

        class _Bar(TextProgressBar):
            def _draw_bar(self, remaining, all, **kwargs):  # noqa: A002 - distributed's name
                frac = (1 - remaining / all) if all else 1.0
                with contextlib.suppress(ValueError, OSError):
                    sys.stderr.write(_bar_text(number, name, frac, self.elapsed))
                    sys.stderr.flush()

            def _draw_stop(self, **kwargs):
                with contextlib.suppress(ValueError, OSError):
                    sys.stderr.write("\n")  # the finished stage keeps its line
                    sys.stderr.flush()

        _Bar(futures, interval="100ms", complete=True)
        return

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
    keys = []
    for o in objs:
        with contextlib.suppress(Exception):
            keys.extend(o.__dask_keys__() if hasattr(o, "__dask_keys__") else [])
    if mode == "bar":
        from dask.diagnostics import ProgressBar

        number, name = _label(_stage_name(_flatten(keys)) if keys else "local")

        class _Bar(ProgressBar):
            def _draw_bar(self, frac, elapsed):
                with contextlib.suppress(ValueError, OSError):
                    self._file.write(_bar_text(number, name, frac, elapsed))
                    self._file.flush()

        return _Bar(out=sys.stderr)
    from dask.callbacks import Callback

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
