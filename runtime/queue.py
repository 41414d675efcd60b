"""Asynchronous execution: one worker thread per target, FIFO, and handles to wait on.

A target's executables run one task at a time (on its worker thread, or inline in a caller that
found the queue empty), so a VM that is not thread-safe is never entered twice at once.

Bounds and ownership:
- Back-pressure: at most `MAX_QUEUED` tasks (64, or the GDP_MAX_QUEUED environment variable) wait
  on a target's queue; a submit beyond that waits until the worker takes one (or, asked not to
  wait, raises QueueFullError), so a producer faster than the target cannot queue unbounded
  inputs.
- A finished, successful task is forgotten by the queue at once: only the caller's handle keeps
  its outputs alive. A failed task is kept (its error only) until `result()` or `sync()` reports
  it; past `MAX_UNREPORTED` unreported failures the oldest are dropped and counted.
- `sync()` waits for every task submitted before it (by any thread) and raises only the
  failures of the calling thread's own tasks (and of tasks whose submitting thread has ended):
  a failure is never raised in another live thread's `sync()`.
- After `os.fork()` the child starts with no workers and no tasks (the parent's worker threads
  do not exist there): its first run starts a worker of its own. A task of the parent still
  unfinished at the fork fails in the child with an ExecutionError if waited on there.
"""

from __future__ import annotations

import atexit
import itertools
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from gdp.errors import ExecutionError, GdpError, QueueFullError
from gdp.runtime.profiling import Profile

MAX_QUEUED = int(os.environ.get("GDP_MAX_QUEUED") or 64)
MAX_UNREPORTED = 1024


class Task:
    """The handle `gdp.run_async` returns."""

    def __init__(self, profile: Profile | None = None) -> None:
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self._observed = False
        self._owner: threading.Thread | None = None  # the thread that submitted it
        self._seq = 0
        self.profile = profile

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the task ends (or `timeout` seconds); True if it ended."""
        return self._done.wait(timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The task's outputs (a dict name -> array); raises the task's error if it failed."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"task not finished after {timeout} s")
        if self._error is not None:
            self._observed = True
            _registry.reported(self)
            raise self._error
        return self._value

    def _unreported(self) -> bool:
        return self._error is not None and not self._observed

    def _finish(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
        self._done.set()
        _registry.finished(self)


class _Registry:
    """The tasks `sync()` may have to wait for or report: those queued or running, and those
    that failed unreported. Finished successful tasks are not kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[Task, None] = {}
        self._failed: dict[Task, None] = {}
        self._dropped: dict[threading.Thread, int] = {}  # failures forgotten, by owner
        self._seq = itertools.count()

    def add(self, task: Task) -> None:
        task._owner = threading.current_thread()
        with self._lock:
            task._seq = next(self._seq)
            self._running[task] = None

    def remove(self, task: Task) -> None:
        with self._lock:
            self._running.pop(task, None)

    def finished(self, task: Task) -> None:
        with self._lock:
            if task not in self._running:
                return  # not submitted through a queue (run inline): its caller reads it
            del self._running[task]
            if not task._unreported():
                return
            self._failed[task] = None
            if len(self._failed) > MAX_UNREPORTED:
                oldest = next(iter(self._failed))
                del self._failed[oldest]
                self._dropped[oldest._owner] = self._dropped.get(oldest._owner, 0) + 1

    def reported(self, task: Task) -> None:
        with self._lock:
            self._failed.pop(task, None)

    def running(self) -> list[Task]:
        with self._lock:
            return list(self._running)

    def take_failures(self, me: threading.Thread) -> tuple[list[Task], int]:
        """The unreported failures of `me`'s tasks and of tasks whose thread has ended, in
        submission order, now counted as reported; and how many of theirs were dropped."""

        def ours(owner: threading.Thread | None) -> bool:
            return owner is me or owner is None or not owner.is_alive()

        with self._lock:
            mine = sorted((t for t in self._failed if ours(t._owner)), key=lambda t: t._seq)
            for task in mine:
                del self._failed[task]
                task._observed = True
            dropped = 0
            for owner in [o for o in self._dropped if ours(o)]:
                dropped += self._dropped.pop(owner)
        return mine, dropped


class Worker:
    def __init__(self, name: str) -> None:
        self.name = name
        # Bounded: a submit waits while MAX_QUEUED tasks are queued (back-pressure).
        self._queue: queue.Queue = queue.Queue(maxsize=MAX_QUEUED)
        # Held while any task of this target executes, on the worker or inline: one at a time.
        self._executing = threading.Lock()
        self._count_lock = threading.Lock()
        self._unfinished = 0
        self._thread = threading.Thread(target=self._loop, name=f"gdp-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any], task: Task, block: bool = True) -> Task:
        """Queue `fn` to run on the worker; waits while MAX_QUEUED tasks are queued, or with
        `block=False` raises QueueFullError."""
        with self._count_lock:
            self._unfinished += 1
        _registry.add(task)
        try:
            self._queue.put((fn, task), block=block)
        except BaseException as err:  # full, or interrupted waiting for room: nothing queued
            _registry.remove(task)
            with self._count_lock:
                self._unfinished -= 1
            if isinstance(err, queue.Full):
                raise QueueFullError(
                    f"{self.name}: {MAX_QUEUED} runs are queued already (gdp.runtime.queue."
                    "MAX_QUEUED, GDP_MAX_QUEUED); submit with block=True to wait for room"
                ) from None
            raise
        return task

    def run_now(self, fn: Callable[[], Any], task: Task) -> Task:
        """Run in the calling thread when nothing is queued before it (a synchronous call then
        skips two thread hand-offs); otherwise queue it behind the earlier work, in order.

        Only the main thread runs inline: TVM's runtime gives every thread that runs a kernel a
        thread pool of its own, which outlives the thread, so a server calling from a thread per
        request would leak a pool per request; other threads hand the task to the worker."""
        if threading.current_thread() is not threading.main_thread():
            return self.submit(fn, task)
        with self._count_lock:
            idle = self._unfinished == 0
        if not idle:
            return self.submit(fn, task)
        with self._executing:
            self._execute(fn, task)
        return task

    def call(self, fn: Callable[[], Any]) -> Any:
        """fn()'s value (or its error, as a task would raise it), run as run_now runs a task:
        inline in the main thread when nothing is queued, else on the worker after the earlier
        work. Without a Task: what a synchronous eager call (gdp.cv2) pays for the hand-off."""
        if threading.current_thread() is threading.main_thread():
            with self._count_lock:
                idle = self._unfinished == 0
            if idle:
                with self._executing:
                    return _guarded(fn, self.name)
        task = Task()
        self.submit(fn, task)
        return task.result()

    def _loop(self) -> None:
        # A run that launches asynchronously (its device computes on its own: the gpu) is
        # finished only after the next queued run is launched, so that the next run's host
        # work overlaps its copies and kernels; with nothing queued it is finished at once.
        # Runs still finish, and their tasks end, in the order they were submitted.
        launched = None  # (finish, task) of a run whose device work may still be going on
        while True:
            if launched is None:
                item = self._queue.get()
            else:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    item = None
            with self._executing:
                started = self._launch(*item) if item is not None else None
                if launched is not None:
                    self._execute(*launched)
                    self._one_done()
            launched = started
            if item is not None and started is None:
                self._one_done()
            # The runs' inputs are not kept alive while the queue is empty.
            del item, started

    def _one_done(self) -> None:
        with self._count_lock:
            self._unfinished -= 1

    def _launch(self, fn: Callable[[], Any], task: Task) -> tuple | None:
        """Start `fn` through its `launch()` where it runs asynchronously (`fn.asynchronous`):
        (finish, task) to execute later. Else (or where launching failed) run it to its end
        now: None."""
        launch = getattr(fn, "launch", None) if getattr(fn, "asynchronous", False) else None
        if launch is None:
            self._execute(fn, task)
            return None
        try:
            finish = _guarded(launch, self.name)
        except GdpError as err:
            task._finish(error=err)
            return None
        return finish, task

    def _execute(self, fn: Callable[[], Any], task: Task) -> None:
        try:
            value = _guarded(fn, self.name)
        except GdpError as err:  # a backend failure must not kill the worker
            task._finish(error=err)
        else:
            task._finish(value)


def _guarded(fn: Callable[[], Any], target: str) -> Any:
    """fn()'s value; an error that is not gdp's raised as an ExecutionError naming the target."""
    try:
        return fn()
    except GdpError:
        raise
    except Exception as err:
        raise ExecutionError(f"run on {target} failed: {type(err).__name__}: {err}") from err


_registry = _Registry()
_workers: dict[str, Worker] = {}
_workers_lock = threading.Lock()


def worker(name: str) -> Worker:
    with _workers_lock:
        if name not in _workers:
            _workers[name] = Worker(name)
        return _workers[name]


def sync() -> None:
    """Wait for every task submitted so far (by any thread). If any of the calling thread's
    tasks failed and its error was not taken through `result()`, raise the first such error once
    all have ended, so failures are never silent; another live thread's failures are left for
    its own `sync()` (those of a thread that has ended are raised by the next `sync()`)."""
    for task in _registry.running():
        task.wait()
    failed, dropped = _registry.take_failures(threading.current_thread())
    if not failed:
        return
    error = failed[0]._error
    more = len(failed) - 1 + dropped
    if more:
        error.add_note(f"{more} more task(s) failed too; use each handle's result()")
    raise error


def _drain_at_exit() -> None:
    for task in _registry.running():
        task.wait()


def _after_fork_in_child() -> None:
    """The child of a fork has only the forking thread: no worker threads, and locks that
    another thread held at the fork stay held. Start afresh; the parent's unfinished tasks fail
    here if waited on (they run in the parent only)."""
    global _registry, _workers, _workers_lock
    old = _registry
    _registry, _workers, _workers_lock = _Registry(), {}, threading.Lock()
    for task in list(old._running):
        task._done = threading.Event()  # its Condition may have been held by another thread
        task._finish(
            error=ExecutionError(
                "the run was queued in the parent process when it forked; it runs there, "
                "not in the child"
            )
        )
        task._observed = True


atexit.register(_drain_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)
