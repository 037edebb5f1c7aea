"""Child processes of the local cluster: started with their output in a log
file, stopped in reverse order, and reported with the end of their log when
one dies early.

Children get PR_SET_PDEATHSIG, so a killed parent never leaves a control
plane or a kubelet behind (what those leave on the host is swept by
devstack.hoststate).
"""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import IO, Callable, Mapping


class ClusterStartError(RuntimeError):
    """The local cluster could not be built or started; the message says which part and where its log is."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG = 1: the kernel sends SIGTERM when the parent exits.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


class Children:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._running: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []

    def spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{name}.log", "ab")
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent, env=dict(env) if env is not None else None,
        )
        self._running.append((name, process, log))

    def stop(self, name: str | None = None, timeout: float = 10.0) -> None:
        """Stop one child by name, or all of them, the last started first."""
        for entry in reversed(list(self._running)):
            child, process, log = entry
            if name is not None and child != name:
                continue
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            log.close()
            self._running.remove(entry)

    def pids(self) -> dict[str, int]:
        """Each running child's process id, by name."""
        return {name: process.pid for name, process, _log in self._running if process.poll() is None}

    def check(self) -> None:
        """Raise with the end of its log if a child has exited."""
        for name, process, _log in self._running:
            if process.poll() is not None:
                log_path = self.log_dir / f"{name}.log"
                tail = log_path.read_text(errors="replace").splitlines()[-15:]
                raise ClusterStartError(f"{name} exited with {process.returncode}; last lines of {log_path}:\n"
                                        + "\n".join(tail))


def wait_for(probe: Callable[[], bool], what: str, deadline: float, *children: Children) -> None:
    """Poll `probe` until it holds; fail at once if a child dies, or at the deadline."""
    while time.monotonic() < deadline:
        for group in children:
            group.check()
        if probe():
            return
        time.sleep(0.25)
    logs = ", ".join(str(group.log_dir) for group in children)
    raise ClusterStartError(f"{what} did not become ready in time; logs in {logs}")
