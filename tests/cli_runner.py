"""``mmdwatch`` commands run in the test's own process: ``monitor.cli.main(argv)`` with its
stdout, stderr and exit status captured as a ``subprocess.CompletedProcess``.

Why: a child process pays about 3.8 s of CPU to import torch and mmdwatch before it does
anything, and the suite started some 100 of them (2026-12-03). One-shot commands (inspect,
backfill, check-config, ack, demo) have no process-wide side effect that outlives ``main``,
so the test process runs them itself. Tests about the process itself (signals, SIGKILL, the
environment it reads, what ``--help`` imports, ``python -m monitor.cli``) keep a real child
process.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import traceback
from pathlib import Path


def run_mmdwatch(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``mmdwatch ARGS...`` in this process, in ``cwd`` when given.

    The exit status is what ``python -m monitor.cli`` would return: ``main``'s value, a
    ``SystemExit``'s code (argparse: 2), or 1 with the traceback on stderr for an uncaught
    exception. The log goes to the captured stderr as in a child process: ``main`` sets up
    logging with ``logging.basicConfig``, a no-op while the root logger has handlers (pytest
    adds its own), so those are set aside for the call and put back after it.
    """
    from monitor.cli import main

    argv = [os.fspath(a) for a in args]
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    stdout, stderr = io.StringIO(), io.StringIO()
    root.handlers = []
    try:
        with contextlib.ExitStack() as stack:
            if cwd is not None:
                stack.enter_context(contextlib.chdir(cwd))
            stack.enter_context(contextlib.redirect_stdout(stdout))
            stack.enter_context(contextlib.redirect_stderr(stderr))
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's errors and --help
                if isinstance(exc.code, str):  # sys.exit("message"): printed, status 1
                    print(exc.code, file=stderr)
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            except Exception:  # noqa: BLE001 (what an uncaught one does to a child process)
                traceback.print_exc(file=stderr)
                code = 1
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers = saved_handlers
        root.setLevel(saved_level)
    return subprocess.CompletedProcess(["mmdwatch", *argv], code, stdout.getvalue(),
                                       stderr.getvalue())
