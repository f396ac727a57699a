"""A private PostgreSQL server for tests and benchmarks: started with the installed server binaries
(Debian's ``postgresql``, which ``.ci/run`` installs) in a temporary folder, on a free loopback port,
with password authentication and a random password; stopped and removed at the end."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


class NoServer(RuntimeError):
    """No server can be started here; the message says why."""


def server_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl, or None."""
    found = shutil.which("pg_ctl")
    if found and (Path(found).resolve().parent / "initdb").exists():
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def private_server() -> Iterator[tuple[str, str]]:
    """(URL without password, password) of a fresh server, user ``hybriddeid``, database ``postgres``;
    ``NoServer`` when none can be started. As root, the server runs as the ``postgres`` user."""
    bindir = server_binaries()
    if bindir is None:
        raise NoServer("no PostgreSQL server binaries (initdb, pg_ctl) on this machine: apt-get install postgresql")
    user: dict = {}
    if os.geteuid() == 0:  # the server refuses to run as root
        try:
            user = {"user": pwd.getpwnam("postgres").pw_uid}
        except KeyError:
            raise NoServer("running as root and there is no 'postgres' user to run the server as") from None
    root = Path(tempfile.mkdtemp(prefix="hybriddeid-pg-"))
    password = secrets.token_hex(12)
    (root / "pw").write_text(password + "\n")
    for path in (root, root / "pw"):
        if user:
            os.chown(path, user["user"], -1)
    port = _free_port()
    data = root / "data"
    try:
        try:
            subprocess.run(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "hybriddeid",
                    "--pwfile",
                    str(root / "pw"),
                    "--auth",
                    "scram-sha-256",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
                check=True,
                capture_output=True,
                timeout=120,
                **user,
            )
            subprocess.run(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-l",
                    str(root / "log"),
                    "-w",
                    "-o",
                    f"-p {port} -k {root} -h 127.0.0.1 -c fsync=off",
                    "start",
                ],
                check=True,
                capture_output=True,
                timeout=120,
                **user,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            raise NoServer(f"cannot start a PostgreSQL server here ({type(exc).__name__})") from None
        try:
            yield f"postgresql://hybriddeid@127.0.0.1:{port}/postgres", password
        finally:
            subprocess.run(
                [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                capture_output=True,
                timeout=60,
                **user,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
