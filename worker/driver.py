"""A warm driver process: one Python process holding a ready SparkSession, running one attempt at a time.

    python -m sparkyard.worker.driver RUN_FD:CONTROL_FD WORKER_PID SPARK_MASTER CONF_JSON FROZEN_LIMIT_S

The worker's session runner (worker/runner/session.py) keeps a pool of these. The connect runner keeps
the same pool with SPARK_MASTER ``connect``: then a driver holds no Spark of its own and each attempt
gets a Spark Connect session of its own instead (worker/remote_spark.py). Task code never runs inside
the worker: an attempt that calls ``os._exit``, segfaults or eats all memory ends this process, and the
worker fails that one attempt and warms a replacement.

Protocol on two sockets (newline-delimited JSON, one object per line):

* RUN_FD, driver → worker: ``{"op": "ready", "version": …}`` once Spark is up; ``{"op": "start_failed",
  "error": …}`` if it cannot start; ``{"op": "done", "id": …, "ok": …, "result_json", "error",
  "traceback", "exit_code", "recycle", "log_start", "log_end"}`` per attempt (``recycle``: why this process must
  run no other attempt, '' when it may; ``log_start``/``log_end``: the attempt's bytes of the log file its run
  message named, which stays open for the next attempt: worker/logs.py), or ``{"op": "done", "id": …, "fresh": [items]}`` without running it when the job's conf
  has items this driver's JVM did not start with and cannot take (worker/warm_conf.py; a run message
  with ``"fresh": true`` is for a driver started with them and is always run);
* RUN_FD, worker → driver: ``{"op": "run", "id": …, …}`` (see :func:`_run`), ``{"op": "exit"}``; read by the
  main thread itself, which runs the attempts (no hand-over between threads per attempt);
* CONTROL_FD (a SOCK_SEQPACKET pair: one JSON object per message), worker → driver: ``{"op": "cancel", "id":
  …}`` (cancel the attempt's Spark jobs and interrupt its Python code; the worker kills the process if that is
  not enough within its grace), read by a thread of its own while the main thread runs the attempt.

Per attempt the driver changes process-wide state — working directory, ``sys.argv``, ``sys.path``,
environment, file descriptors 1 and 2 (to the attempt's log) — and puts it all back afterwards; modules
the attempt imported from its own code are forgotten so the next attempt loads its own version, and the
logging configuration the attempt changed is restored. As at a program's exit, the attempt ends when its
non-daemon threads and its ``atexit`` functions have run; one that leaves a daemon thread or a child process
running retires the driver (worker/py_state.py). Python's process-wide settings the attempt changed (signal handlers and
timers, warnings filters, recursion limit, socket timeout, umask, hooks…) are put back too. The
process dies with the worker (``PR_SET_PDEATHSIG``), and the worker records it before handing it work so
a restarted worker ends it if it was left behind.

A worker that is frozen (``SIGSTOP``, a stopped container) neither dies nor renews its leases: past the
lease the master runs the task elsewhere, and its cancel would never reach this driver. So a watchdog
thread looks at the worker's process state while an attempt runs, and a worker seen stopped for
FROZEN_LIMIT_S (the worker's ``--driver-frozen-limit``, 1 s by default) has its attempt stopped here, as a
cancel would (then the process exits if the attempt does not end within :data:`FROZEN_KILL_GRACE_S`) — before
any lease can lapse, so the task never runs twice at once.
"""

from __future__ import annotations

import os
import sys

# ``-m`` put the worker's working directory first on sys.path: user code must not import from there.
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

import ctypes  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import socket  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402

from sparkyard.defaults import DEFAULT_DRIVER_FROZEN_LIMIT_S  # noqa: E402
from sparkyard.worker.children import die_with_parent  # noqa: E402
from sparkyard.worker.context import ENV_TASK, TaskContext, set_current  # noqa: E402
from sparkyard.worker.disk import NO_SPACE_ERRNOS  # noqa: E402
from sparkyard.worker.entry import LazySpark, ScriptExit, encode_result, invoke  # noqa: E402
from sparkyard.worker.py_state import (  # noqa: E402
    ExitHooks,
    ImportedModules,
    LoggingState,
    ProcessState,
    ChildProcesses,
    join_program_threads,
    left_running,
    own_logging,
)
from sparkyard.worker.remote_spark import CONNECT_MODE  # noqa: E402

# Spark settings of every driver unless the worker's config overrides them: no UI (a pool of drivers
# would fight over ports 4040+); a fresh Python worker per Spark task, so a module one attempt's UDF
# imported on an executor is not what the next attempt's UDF finds there (compat.py ships each
# attempt's own code); few shuffle partitions for the warm-up and the driver's own work (an attempt's
# session has Spark's default, 200, as under spark-submit, unless the worker's or the job's conf says).
DRIVER_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
               "spark.sql.shuffle.partitions": "8", "spark.python.worker.reuse": "false"}
# On a cluster (any master but local[…]) a warm driver is a long-lived application that runs nothing
# between attempts: it holds executors only while it has work (dynamic allocation, shuffle files tracked
# by the driver, no external shuffle service needed; an idle executor that holds shuffle files goes after
# 30 s too, where Spark would keep it as long as the driver's JVM references the shuffle, which a warm
# driver's may do for good), one core each, so the drivers of a worker's slots
# share the cluster's cores instead of the first one taking them all.
CLUSTER_CONF = {"spark.dynamicAllocation.enabled": "true", "spark.dynamicAllocation.shuffleTracking.enabled": "true",
                "spark.dynamicAllocation.minExecutors": "0", "spark.dynamicAllocation.executorIdleTimeout": "30s",
                "spark.dynamicAllocation.shuffleTracking.timeout": "30s",
                "spark.executor.cores": "1"}

# After stopping the attempt, how long it may take to end before the driver process exits instead.
FROZEN_KILL_GRACE_S = 2.0
WATCH_INTERVAL_S = 0.1
# A control message (a cancel: an op and an attempt's id) is far smaller than this.
MAX_CONTROL_BYTES = 64 * 1024

log = logging.getLogger("sparkyard.driver")
TASK_LOG = logging.getLogger("sparkyard.task")  # ctx.logger: the attempt's log is its own file already


class TaskKilled(BaseException):
    """Raised in the main thread to stop a cancelled attempt (a BaseException: ``except Exception`` passes)."""


class Driver:
    def __init__(self, sock: socket.socket, control: socket.socket, spark_master: str, conf: dict[str, str],
                 frozen_limit_s: float = DEFAULT_DRIVER_FROZEN_LIMIT_S) -> None:
        self._sock = sock
        # Reads are buffered (an unbuffered readline costs one recv per byte); writes go out whole, at once.
        self._reader = sock.makefile("rb")
        self._writer = sock.makefile("wb", buffering=0)
        self._control = control  # SOCK_SEQPACKET: one message per recv, never half of one
        self._send_lock = threading.Lock()
        self._master = spark_master
        self._local = spark_master.startswith("local")
        self._conf = {**DRIVER_CONF, **({} if self._local else CLUSTER_CONF), **conf}
        self._worker_conf = conf
        self._frozen_limit_s = frozen_limit_s  # a worker seen stopped this long: its attempt is stopped (_watch)
        self._current = ""
        # The file the attempts' logs are appended to, open across attempts (worker/logs.py), until the
        # worker names another (a new day's).
        self._log_path = ""
        self._log_fd = -1
        self._log_end = -1  # where the last attempt's bytes of it ended
        self._header = b""  # the current attempt's first lines, as written at its start
        self._children = ChildProcesses()
        # What every attempt starts from and the driver returns to after it, taken once: its working directory,
        # its own stdout and stderr (duplicates kept open), the modules loaded (marked per attempt) and the
        # process's settings (before the first attempt: Spark's start sets some).
        self._home, self._stdio = os.getcwd(), (os.dup(1), os.dup(2))
        self._modules = ImportedModules()
        self._process: ProcessState | None = None
        self._kill_lock = threading.Lock()
        self._main_ident = threading.get_ident()
        self.shared: Any = None  # SharedSpark or RemoteSpark: the attempt's Spark

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        with self._send_lock:
            self._writer.write(data)

    def start(self) -> bool:
        try:
            if self._master == CONNECT_MODE:
                from sparkyard.worker.remote_spark import RemoteSpark

                self.shared = RemoteSpark()
            else:
                from sparkyard.worker.compat import SharedSpark

                # On a cluster a warm-up job would hold the driver until an executor is free.
                own_sql = frozenset(k for k in DRIVER_CONF if k.startswith("spark.sql.") and k not in self._worker_conf)
                self.shared = SharedSpark.build(self._master, self._conf, warm=self._local, own_sql=own_sql)
            self.shared.install()
        except BaseException as exc:
            self.send({"op": "start_failed", "error": f"{type(exc).__name__}: {exc}".splitlines()[0]})
            return False
        self.send({"op": "ready", "version": self.shared.version, "pid": os.getpid()})
        return True

    def serve(self, worker_pid: int) -> None:
        self._children.mark()  # its JVM, started with Spark: an attempt's own children are extra
        threading.Thread(target=self._read_control, name="sparkyard-driver-control", daemon=True).start()
        threading.Thread(target=self._watch, args=(worker_pid,), name="sparkyard-driver-watchdog",
                         daemon=True).start()
        for line in self._reader:  # until the worker asks to exit or closes the socket
            message = json.loads(line)
            op = message.get("op")
            if op == "run":
                self.send(self._run(message))
            elif op == "exit":
                return

    def _read_control(self) -> None:
        while data := self._control.recv(MAX_CONTROL_BYTES):  # b"": the worker closed it
            message = json.loads(data)
            if message.get("op") == "cancel":
                self._cancel(message.get("id", ""))

    def _watch(self, worker_pid: int) -> None:
        """Stop the running attempt of a worker that stays frozen (see the module docstring)."""
        stopped_since: float | None = None
        while True:
            time.sleep(WATCH_INTERVAL_S)
            if not worker_stopped(worker_pid):
                stopped_since = None
                continue
            now = time.monotonic()
            stopped_since = stopped_since if stopped_since is not None else now
            attempt_id = self._current
            if not attempt_id or now - stopped_since < self._frozen_limit_s:
                continue
            log.warning("worker %d stopped for %.1fs: stopping attempt %s before its lease lapses", worker_pid,
                        now - stopped_since, attempt_id)
            self._cancel(attempt_id)
            deadline = time.monotonic() + FROZEN_KILL_GRACE_S
            while self._current == attempt_id and time.monotonic() < deadline:
                time.sleep(WATCH_INTERVAL_S)
            if self._current == attempt_id:
                log.warning("attempt %s did not stop within %.0fs; exiting", attempt_id, FROZEN_KILL_GRACE_S)
                os._exit(1)

    def _cancel(self, attempt_id: str) -> None:
        with self._kill_lock:
            if not attempt_id or attempt_id != self._current:
                return
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._main_ident), ctypes.py_object(TaskKilled))
        try:
            self.shared.cancel()
        except Exception:
            log.debug("cancelling the attempt's Spark work failed", exc_info=True)

    def _not_killable(self) -> None:
        """The attempt's code is over: no cancel may interrupt what follows (one already raised is dropped)."""
        with self._kill_lock:
            self._current = ""
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._main_ident), None)

    def _run(self, task: dict[str, Any]) -> dict[str, Any]:
        """One attempt, with every piece of process state it may change put back afterwards."""
        attempt_id = task["id"]
        if not task.get("fresh"):
            refused = self.shared.cannot_apply(task["conf"])
            if refused:  # before anything of the attempt runs: the worker gives it a fresh driver
                return {"op": "done", "id": attempt_id, "fresh": refused}
        try:
            log_start, stray = self._open_log(task["log_path"], task["header"])
        except OSError as exc:  # nothing of the attempt ran: a full disk hands it back (worker/disk.py)
            return {"op": "done", "id": attempt_id, "ok": False, "no_space": exc.errno in NO_SPACE_ERRNOS,
                    "error": f"could not start: its log {task['log_path']} cannot be written: {exc}"}
        if self._process is None:
            self._process = ProcessState()
        process = self._process
        saved_path, saved_argv = list(sys.path), list(sys.argv)
        saved_env = _environ_snapshot()
        self._modules.mark()
        logging_before, threads_before, exit_hooks = LoggingState(), set(threading.enumerate()), ExitHooks()
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._log_fd, 1)
        os.dup2(self._log_fd, 2)
        reply: dict[str, Any] = {"op": "done", "id": attempt_id}
        try:
            os.environ.update(task["env"])
            sys.path[:0] = task["sys_path"]
            os.chdir(task["cwd"])
            ctx = TaskContext.from_json(task["env"][ENV_TASK], TASK_LOG)
            set_current(ctx)
            self.shared.begin(task, _warn_in_log)
            with self._kill_lock:
                self._current = attempt_id
            exit_hooks.install()
            value = invoke(task["entrypoint"], LazySpark(self.shared.session), ctx)
            self._program_exit(threads_before, exit_hooks)
            self._not_killable()
            reply.update(ok=True, result_json=encode_result(value, int(task["result_max_bytes"])))
        except BaseException as exc:  # the outcome of user code, whatever it raised, is the attempt's result
            if not isinstance(exc, TaskKilled):  # Python does this however the main code ended
                try:
                    self._program_exit(threads_before, exit_hooks)
                except TaskKilled:
                    pass
            self._not_killable()
            if isinstance(exc, ScriptExit):  # an exit code is not an error with a traceback
                reply.update(ok=False, error=str(exc), exit_code=exc.exit_code)
            else:
                traceback.print_exc()
                message = f"{type(exc).__name__}: {exc}".splitlines()[0]
                reply.update(ok=False, error=message, traceback=traceback.format_exc(), exit_code=1)
        finally:
            exit_hooks.uninstall()
            set_current(None)
            self.shared.end()
            reply["recycle"] = "; ".join(r for r in (self.shared.dirty(), left_running(threads_before),
                                                     self._children.left_running(), stray) if r)
            logging_before.restore()
            process.restore()
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(self._stdio[0], 1)
            os.dup2(self._stdio[1], 2)
            reply.update(self._logged(log_start))
            os.chdir(self._home)
            sys.path[:] = saved_path
            sys.argv[:] = saved_argv
            _restore_environ(saved_env)
            time.tzset()  # the C library's time zone, which a program's TZ and tzset() changed, as it was
            self._modules.forget(task["sys_path"])
        return reply

    def _open_log(self, path: str, header: str) -> tuple[int, str]:
        """Where the attempt's log starts in ``path`` (opened unless it is the file already open), its first
        lines written; and why this driver must retire after it ('' if it need not): bytes that reached the
        file since the last attempt ended came from a process an earlier attempt left (a grandchild the
        children check cannot see), which would write on into this attempt's range and the next ones'."""
        if path != self._log_path:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)  # read: _logged
            if self._log_fd >= 0:
                os.close(self._log_fd)
            self._log_path, self._log_fd, self._log_end = path, fd, -1
        start = os.lseek(self._log_fd, 0, os.SEEK_END)
        self._header = header.encode()
        os.write(self._log_fd, self._header)
        stray = start - self._log_end if self._log_end >= 0 else 0
        return start, (f"{stray} bytes reached its log between attempts: a process an earlier attempt left "
                       "writes to it" if stray else "")

    def _logged(self, start: int) -> dict[str, Any]:
        """The attempt's bytes of its log file: from ``start`` to the end while its first lines are still where
        they were written. If not, the attempt truncated or overwrote the file (a program opening /dev/stdout
        for writing opens it again with O_TRUNC): the ranges of the attempts before it would read this one's
        output, so the file is set aside whole as this attempt's log (``log_file``; those ranges now name
        nothing), and the next attempt gets a file of another name from the worker."""
        end = os.lseek(self._log_fd, 0, os.SEEK_END)
        if os.pread(self._log_fd, len(self._header), start) == self._header:
            self._log_end = end
            return {"log_start": start, "log_end": end}
        aside = f"{self._log_path.removesuffix('.log')}.overwritten-at-{start}.log"
        os.rename(self._log_path, aside)
        os.close(self._log_fd)
        self._log_path, self._log_fd, self._log_end = "", -1, -1
        return {"log_start": 0, "log_end": end, "log_file": aside}

    @staticmethod
    def _program_exit(threads_before: set[threading.Thread], exit_hooks: ExitHooks) -> None:
        """What Python does when a program's main code ends, before its process exits (worker/py_state.py)."""
        join_program_threads(threads_before)
        exit_hooks.run()


def worker_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped by a signal or a tracer (state T or t in /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except OSError:
        return False  # gone (the parent-death signal ends this process) or no /proc
    return bool(fields) and fields[0] in (b"T", b"t")


def _warn_in_log(text: str) -> None:
    print(f"sparkyard: warning: {text}", file=sys.stderr)  # fd 2 is the attempt's log while it runs


def _environ_snapshot() -> dict[bytes, bytes]:
    """The environment as the encoded map behind ``os.environ``: copying it decodes nothing (a decoded
    copy and its restore were most of a no-op attempt's time)."""
    return dict(os.environ._data)  # type: ignore[attr-defined]


def _restore_environ(saved: dict[bytes, bytes]) -> None:
    """Put the environment back as it was, touching (putenv/unsetenv) only what the attempt changed."""
    data = os.environ._data  # type: ignore[attr-defined]
    if data == saved:
        return
    for key in [k for k in data if k not in saved]:
        del os.environ[os.fsdecode(key)]
    for key, value in saved.items():
        if data.get(key) != value:
            os.environ[os.fsdecode(key)] = os.fsdecode(value)


def main(argv: list[str]) -> int:
    run_fd, _, control_fd = argv[1].partition(":")
    worker_pid, spark_master, conf_json, frozen_limit_s = int(argv[2]), argv[3], argv[4], float(argv[5])
    die_with_parent(worker_pid)
    own_logging()  # the root logger stays as a fresh interpreter has it, for the programs (worker/py_state.py)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    driver = Driver(socket.socket(fileno=int(run_fd)), socket.socket(fileno=int(control_fd)), spark_master,
                    json.loads(conf_json), frozen_limit_s)
    if not driver.start():
        return 1
    driver.serve(worker_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
