"""Asynchronous execution: one worker thread per target, FIFO, and handles to wait on.

A target's executables run one task at a time (on its worker thread, or inline in a caller that
found the queue empty), so a VM that is not thread-safe is never entered twice at once.
"""

from __future__ import annotations

import atexit
import queue
import threading
from collections.abc import Callable
from typing import Any

from gdp.errors import ExecutionError, GdpError
from gdp.runtime.profiling import Profile


class Task:
    """The handle `gdp.run_async` returns."""

    def __init__(self, profile: Profile | None = None) -> None:
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self._observed = False
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
        self._observed = True
        if self._error is not None:
            raise self._error
        return self._value

    def _unreported(self) -> bool:
        return self._error is not None and not self._observed

    def _finish(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
        self._done.set()


class Worker:
    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        # Held while any task of this target executes, on the worker or inline: one at a time.
        self._executing = threading.Lock()
        self._count_lock = threading.Lock()
        self._unfinished = 0
        self._thread = threading.Thread(target=self._loop, name=f"gdp-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any], task: Task) -> Task:
        with self._count_lock:
            self._unfinished += 1
        _pending.add(task)
        self._queue.put((fn, task))
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
        while True:
            fn, task = self._queue.get()
            with self._executing:
                self._execute(fn, task)
            with self._count_lock:
                self._unfinished -= 1

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


class _Pending:
    def __init__(self) -> None:
        self._tasks: list[Task] = []
        self._lock = threading.Lock()

    def add(self, task: Task) -> None:
        with self._lock:
            if len(self._tasks) >= 1024:
                # Forget finished tasks that sync() has nothing left to report about.
                self._tasks = [t for t in self._tasks if not t.done() or t._unreported()]
            self._tasks.append(task)

    def drain(self) -> list[Task]:
        with self._lock:
            tasks, self._tasks = self._tasks, []
        return tasks


_pending = _Pending()
_workers: dict[str, Worker] = {}
_workers_lock = threading.Lock()


def worker(name: str) -> Worker:
    with _workers_lock:
        if name not in _workers:
            _workers[name] = Worker(name)
        return _workers[name]


def sync() -> None:
    """Wait for every task submitted so far. If any failed and its error was not taken through
    `result()`, raise the first such error once all have ended, so failures are never silent."""
    failed: list[Task] = []
    while tasks := _pending.drain():
        for task in tasks:
            task.wait()
            if task._unreported():
                failed.append(task)
    for task in failed:
        task._observed = True
    if failed:
        error = failed[0]._error
        if len(failed) > 1:
            error.add_note(f"{len(failed) - 1} more task(s) failed too; use each handle's result()")
        raise error


def _drain_at_exit() -> None:
    for task in _pending.drain():
        task.wait()


atexit.register(_drain_at_exit)
