"""Run a model server so that it never outlives the gateway (run as a script: stdlib only).

    python keeper.py GRACE_S COMMAND [ARG...]

The gateway starts this in a process group of its own, with a pipe on its stdin. The keeper
starts COMMAND in the same group and waits. When the pipe reaches end-of-file the gateway
is gone (even killed: the kernel closes its end), so the keeper sends the whole group
SIGTERM, then SIGKILL after GRACE_S: no orphan, grandchildren included, on Linux and macOS
alike. When COMMAND exits, the keeper exits the same way (the same code, or the same
signal), so the gateway sees the server's own exit status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time


def _watch_parent(group: int, grace: float, child: subprocess.Popen) -> None:
    """Block on stdin; at end-of-file stop the group (the gateway has gone)."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except OSError:
        pass
    if child.poll() is not None:
        return
    os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if child.poll() is None:
        os.killpg(group, signal.SIGKILL)


def main() -> None:
    grace, command = float(sys.argv[1]), sys.argv[2:]
    # The gateway stops the group with SIGTERM: the server handles it; the keeper only
    # waits to report how the server ended. (A handler, not SIG_IGN, which exec keeps.)
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    except OSError as error:
        print(f"cannot start {command[0]}: {error}", file=sys.stderr, flush=True)
        sys.exit(127)
    watcher = threading.Thread(target=_watch_parent, args=(os.getpgrp(), grace, child), daemon=True)
    watcher.start()
    code = child.wait()
    if code < 0:  # ended by a signal: end by the same one
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # those two take no handler
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(1)
    sys.exit(code)


if __name__ == "__main__":
    main()
