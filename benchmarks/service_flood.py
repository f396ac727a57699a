"""Idle connections against ``hybriddeid serve`` (issue 44, item 4): the server under a low open-file limit,
many connections opened and held without a word, then one request with an API key; how many descriptors
the server holds, whether the request gets in, and how much the log grew.

    python benchmarks/service_flood.py                        # 768 connections at ulimit -n 256, held 30 s
    PYTHONPATH=/path/to/older/checkout python benchmarks/service_flood.py   # the same against older code

Runs the bundled English model on 127.0.0.1 with one worker; prints one summary line.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from hybriddeid.service.keys import add_key


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=768)
    parser.add_argument("--open-files", type=int, default=256, help="the server's RLIMIT_NOFILE, soft and hard")
    parser.add_argument("--hold", type=float, default=30.0, help="seconds the connections are held")
    parser.add_argument("--port", type=int, default=18790)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        keys = folder / "keys.json"
        _, key = add_key(keys, "bench")
        limit = f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, ({args.open_files}, {args.open_files}))\n"
        log = folder / "server.log"
        server = subprocess.Popen(
            [
                sys.executable,
                "-c",
                limit + "import sys\nfrom hybriddeid.cli import main\nsys.exit(main())",
                "serve",
                "--model",
                "en",
                "--port",
                str(args.port),
                "--api-keys",
                str(keys),
                "--workers",
                "1",
                "--bulk-workers",
                "0",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
            cwd=folder,
        )
        url = f"http://127.0.0.1:{args.port}"
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None:
                    raise SystemExit(f"the server did not start: {log.read_text()[-2000:]}")
                time.sleep(0.2)
            before = log.stat().st_size
            held = []
            for _ in range(args.connections):
                try:
                    held.append(socket.create_connection(("127.0.0.1", args.port), timeout=5))
                except OSError:
                    break
            descriptors = len(os.listdir(f"/proc/{server.pid}/fd"))
            started = time.monotonic()
            try:
                answer = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10)
                status = str(answer.status_code)
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            waited = time.monotonic() - started
            time.sleep(max(0.0, args.hold - waited))
            text = log.read_text(errors="replace")[before:]
            print(
                f"{len(held)} idle connections held {args.hold:g} s at ulimit -n {args.open_files}: server "
                f"descriptors {descriptors}, a keyed request {status} in {waited:.1f} s, log +{len(text.encode()):,} "
                f"bytes ({text.count(chr(10)):,} lines, {text.count('Traceback'):,} tracebacks)"
            )
            for sock in held:
                sock.close()
        finally:
            server.terminate()
            server.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
