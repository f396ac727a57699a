"""A bounded load run of ``hybriddeid serve`` on 127.0.0.1 against ``hybriddeid annotate --jobs 2``.

    python benchmarks/service.py [--requests-1k 400] [--requests-10k 60] [--soak 3000] [--big-mb 20]
                                 [--workers 2] [--model en] [--baseline-ref REF] [--parts ...] [--json F]

One server (``--workers`` forked workers, no rate limit) and an async httpx client in this process,
both on this machine: the client's CPU is taken from the same cores, as it would be for a caller on
the same host. Every row tells the load average (1 min) at its start and end.
Notes are generated English notes (``hybriddeid.synth``, test mix) cut at a word to
about 1,000 and 10,000 characters, one note per request to ``POST /v1/annotate``; in the latency runs
(1.) every request's note is one the server has not seen (what workers' caches keep of a note seen before
would flatter them), in the other parts a pool of distinct notes is sent in turn. The script prints, measured in this one run:

1. notes/s and p50/p95/p99 latency at concurrency 1, 8 and 32, for 1 kB and 10 kB notes, with the CPU
   milliseconds per request of the server process, of its workers and of this client (figures the load
   of other jobs moves far less than latencies); and, before each size, the same notes through
   ``processing.process_notes`` in this process, one at a time without HTTP (the floor a request's
   latency sits on). With ``--baseline-ref REF``, a second server runs that commit's code (exported by
   ``git archive``, as ``code_speed.py`` does) and every row is run with both servers, one after the
   other (the order alternating), with the ratios baseline/this (above 1: this checkout is faster);
2. throughput at concurrency 8 against ``hybriddeid annotate --jobs 2`` (JSONL out) on the same 1 kB
   notes as files, timed whole and less its model load (measured in its own process), as ratios to a
   service run just before and one just after it (the load on a shared machine drifts);
3. the p99 of 1 kB notes at concurrency 8 while another connection streams ``--big-mb`` MB notes
   (each held by a worker until the server's time limit, 30 s here, then replaced), against the run
   just before and one just after: first on the server as it starts by default (big requests go to
   its bulk worker, at a lower CPU priority), then on a second server started with ``--bulk-workers 0``
   (every request shares the two workers);
4. the resident memory of the server and its workers sampled every second over a soak of ``--soak``
   requests at concurrency 8 (the mean of the first, middle and last tenth of the samples, peak), with
   the run's request count.

``--parts`` picks among ``latency``, ``batch``, ``big`` and ``soak`` (default: all).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from code_speed import code_env, export_ref, short_hash  # noqa: E402
from procinfo import cpu_seconds, family, resident_mb  # noqa: E402

PARTS = ("latency", "batch", "big", "soak")
BIG_TIMEOUT = 30  # the server's --request-timeout here: a 20 MB note (about 5 min of work) ends in a 504


WARM_UP = 40  # notes each server is given before anything is measured
CONCURRENCIES = (1, 8, 32)  # of the latency runs


def make_notes(count: int, chars: int, seed: int) -> list[str]:
    """``count`` distinct notes of about ``chars`` characters: generated notes joined, cut at a space."""
    from hybriddeid.synth import generate_corpus

    notes, buffer = [], ""
    source = generate_corpus(10**6, seed, "test", "en")
    while len(notes) < count:
        while len(buffer) < chars:
            buffer += next(source).text + "\n"
        cut = buffer.rfind(" ", 0, chars)
        notes.append(buffer[:cut])
        buffer = buffer[cut + 1 :]
    return notes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mb(pid: int) -> tuple[float, float]:
    """Resident MB of ``pid`` and of its descendants together (0, 0 once gone)."""
    return resident_mb(pid) or 0.0, sum(resident_mb(child) or 0.0 for child in family(pid) - {pid})


def tree_cpu(pid: int) -> tuple[float, dict[int, float]]:
    """CPU seconds of the server ``pid`` and of each of its workers."""
    return cpu_seconds(pid), {child: cpu_seconds(child) for child in family(pid) - {pid}}


class Sampler(threading.Thread):
    """RSS of the server and its workers, every second, with the number of requests done by then."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.samples, self.done, self._stop_event = pid, [], 0, threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(1.0):
            self.samples.append((self.done, *rss_mb(self.pid)))

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


async def load(
    url: str,
    key: str,
    notes: list[str],
    requests: int,
    concurrency: int,
    sampler: Sampler | None = None,
    server_pid: int | None = None,
    first: int = 0,
) -> dict[str, float]:
    """``requests`` POSTs of one note each by ``concurrency`` concurrent callers, from ``notes[first]`` on
    (round again from the start where they run out): notes/s, latency percentiles, and with ``server_pid``
    the CPU ms per request of the server, of its workers and of this client."""
    latencies: list[float] = []
    failures: dict[int, int] = {}
    counter = iter(range(requests))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600, limits=limits
    ) as client:

        async def caller() -> None:
            for i in counter:
                started = time.perf_counter()
                answer = await client.post("/v1/annotate", json={"text": notes[(first + i) % len(notes)]})
                latencies.append(time.perf_counter() - started)
                if answer.status_code != 200:
                    failures[answer.status_code] = failures.get(answer.status_code, 0) + 1
                if sampler is not None:
                    sampler.done += 1

        before = tree_cpu(server_pid) if server_pid else None
        client_before = time.process_time()
        started, load_before = time.perf_counter(), os.getloadavg()[0]
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        wall = time.perf_counter() - started
        client = time.process_time() - client_before
        after = tree_cpu(server_pid) if server_pid else None
    ms = np.array(latencies) * 1000
    result = {
        "requests": requests,
        "concurrency": concurrency,
        "notes_per_s": requests / wall,
        "wall_s": wall,
        "p50_ms": float(np.percentile(ms, 50)),
        "p95_ms": float(np.percentile(ms, 95)),
        "p99_ms": float(np.percentile(ms, 99)),
        "failed": sum(failures.values()),
        "failures": failures,
        "load": f"{load_before:.1f}->{os.getloadavg()[0]:.1f}",
    }
    if before is not None and after is not None:  # a worker replaced meanwhile counts from its fork
        workers = sum(seconds - before[1].get(pid, 0.0) for pid, seconds in after[1].items())
        result.update(
            {
                "cpu_ms_server": (after[0] - before[0]) / requests * 1000,
                "cpu_ms_workers": workers / requests * 1000,
                "cpu_ms_client": client / requests * 1000,
            }
        )
    return result


async def big_stream(url: str, key: str, mb: float, stop: asyncio.Event) -> list[int]:
    """One connection sending ``mb`` MB notes one after another until ``stop``: their statuses."""
    text = ("Seen by Dr. Alder Quill on 03/04/2021 at Fenmoor Clinic. " * (int(mb * 2**20) // 58 + 1))[: int(mb * 1e6)]
    body = json.dumps({"text": text}).encode()
    statuses = []
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"}, timeout=600
    ) as client:
        while not stop.is_set():
            request = asyncio.create_task(client.post("/v1/annotate", content=body))
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({request, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if request.done():
                statuses.append(request.result().status_code)
            else:
                request.cancel()
                break
    return statuses


async def with_big_stream(url: str, key: str, notes: list[str], requests: int, mb: float) -> dict:
    stop = asyncio.Event()
    big = asyncio.create_task(big_stream(url, key, mb, stop))
    await asyncio.sleep(3)  # the first big note sent and in a worker's hands
    small = await load(url, key, notes, requests, 8)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as client:  # the gauge counts it too
        text = (await client.get(f"{url}/metrics")).text  # a key: /metrics needs one unless made public
    small["big_in_flight"] = int(float(re.search(r"^hybriddeid_requests_in_flight (\S+)$", text, re.M).group(1))) - 1
    stop.set()
    small["big_statuses"] = await big
    return small


_PIPELINE: dict[str, object] = {}


def direct(model: str, notes: list[str], requests: int, first: int = 0) -> dict[str, float]:
    """The same notes through ``processing.process_notes`` one at a time in this process: what a request
    costs without HTTP, the queue or the workers (the model loaded once, outside the timing)."""
    from hybriddeid.core.document import Document
    from hybriddeid.runs.processing import load_model, process_notes
    from hybriddeid.service.work import warm_up

    if model not in _PIPELINE:
        _PIPELINE[model] = load_model(model)
        warm_up(_PIPELINE[model])
    pipeline = _PIPELINE[model]
    latencies = []
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    for i in range(requests):
        begun = time.perf_counter()
        process_notes(pipeline, [Document(str(i), notes[(first + i) % len(notes)])])
        latencies.append(time.perf_counter() - begun)
    wall = time.perf_counter() - started
    ms = np.array(latencies) * 1000
    return {
        "requests": requests,
        "concurrency": 1,
        "notes_per_s": requests / wall,
        "wall_s": wall,
        "p50_ms": float(np.percentile(ms, 50)),
        "p95_ms": float(np.percentile(ms, 95)),
        "p99_ms": float(np.percentile(ms, 99)),
        "failed": 0,
        "failures": {},
        "load": f"{load_before:.1f}->{os.getloadavg()[0]:.1f}",
    }


def batch_annotate(notes: list[str], model: str, work: Path) -> dict[str, float]:
    """Wall seconds of ``hybriddeid annotate --jobs 2`` over ``notes`` as files, and of loading the model
    (and one note) in a process of its own, to tell the run's time less the load."""
    folder = work / "batch-in"
    folder.mkdir()
    for i, text in enumerate(notes):
        (folder / f"n{i:06d}.txt").write_text(text, encoding="utf-8")
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "hybriddeid.cli",
            "-q",
            "annotate",
            str(folder),
            str(work / "batch-out"),
            "--model",
            model,
            "--jobs",
            "2",
            "--format",
            "jsonl",
        ],
        check=True,
    )
    wall = time.perf_counter() - started
    load = f"{load_before:.1f}->{os.getloadavg()[0]:.1f}"
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from hybriddeid.runs.processing import load_model; "
            "from hybriddeid.service.work import warm_up; "
            f"warm_up(load_model({model!r}))",
        ],
        check=True,
    )
    load_s = time.perf_counter() - started
    return {
        "notes": len(notes),
        "wall_s": wall,
        "load_s": load_s,
        "load": load,
        "notes_per_s": len(notes) / wall,
        "notes_per_s_less_load": len(notes) / max(1e-9, wall - load_s),
    }


def start_server(
    work: Path, model: str, workers: int, code: Path = ROOT, name: str = "server", extra: tuple[str, ...] = ()
) -> tuple[subprocess.Popen, str, str]:
    """A server running ``code``'s hybriddeid, its log in ``work/NAME.log``: (process, url, API key)."""
    keys = work / f"{name}-keys.json"
    env = code_env(code)
    key = subprocess.run(
        [sys.executable, "-m", "hybriddeid.cli", "-q", "serve", "keys", "add", "bench", "--api-keys", str(keys)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=code,
    ).stdout.strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = work / f"{name}.log"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hybriddeid.cli",
            "serve",
            "--model",
            model,
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--api-keys",
            str(keys),
            "--rate-limit",
            "0",
            "--request-timeout",
            str(BIG_TIMEOUT),
            "--max-waiting",
            "1000",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
        env=env,
        cwd=code,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return server, url, key
        except httpx.TransportError:
            pass
        if server.poll() is not None:
            break
        time.sleep(0.2)
    raise SystemExit(f"the server did not start: {log.read_text()[-2000:]}")


def big_notes(url: str, key: str, small: list[str], args: argparse.Namespace, label: str = "") -> dict:
    """The p99 of 1 kB notes at concurrency 8 beside a stream of big notes, against the runs just before
    and just after it."""
    before = asyncio.run(load(url, key, small, args.requests_1k, 8))
    print(row("1 kB", before) + f"  (before the big notes{label})", flush=True)
    beside = asyncio.run(with_big_stream(url, key, small, args.requests_1k, args.big_mb))
    settle(url, key)
    after = asyncio.run(load(url, key, small, args.requests_1k, 8))
    print(
        row("1 kB+big", beside) + f"  (a {args.big_mb:g} MB note stream on another connection{label}, "
        f"{beside['big_in_flight']} in a worker when the small notes ended; statuses {beside['big_statuses']})"
    )
    print(row("1 kB", after) + f"  (after the big notes ended{label})")
    print(
        f"p99 beside big notes / without{label}: x{beside['p99_ms'] / before['p99_ms']:.2f} (run before), "
        f"x{beside['p99_ms'] / after['p99_ms']:.2f} (run after)",
        flush=True,
    )
    settle(url, key)
    return {"before": before, "beside": beside, "after": after}


def settle(url: str, key: str) -> None:
    """Wait until the server answers nothing but this call: a big note whose caller left is still in a
    worker's hands until the time limit ends it."""
    deadline = time.monotonic() + BIG_TIMEOUT + 30
    while time.monotonic() < deadline:
        if (
            "hybriddeid_requests_in_flight 1.0"
            in httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {key}"}).text
        ):
            return
        time.sleep(0.5)


def row(label: str, r: dict) -> str:
    failed = f"  ({r['failed']} failed: {r['failures']})" if r["failed"] else ""
    cpu = (
        f"  CPU ms/req server {r['cpu_ms_server']:.2f} workers {r['cpu_ms_workers']:.2f} client {r['cpu_ms_client']:.2f}"
        if "cpu_ms_server" in r
        else ""
    )
    return (
        f"{label:<10} c={r['concurrency']:<3} {r['requests']:>6} req  {r['notes_per_s']:7.1f} notes/s  "
        f"p50 {r['p50_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  load {r['load']}{cpu}{failed}"
    )


def ratios(baseline: dict, this: dict) -> str:
    """baseline/this of the figures where lower is better, this/baseline of notes/s: above 1, this is faster."""
    parts = [f"notes/s x{this['notes_per_s'] / baseline['notes_per_s']:.2f}"]
    parts += [f"{p} x{baseline[f'{p}_ms'] / this[f'{p}_ms']:.2f}" for p in ("p50", "p95", "p99")]
    if "cpu_ms_workers" in this and "cpu_ms_workers" in baseline:
        parts.append(f"worker CPU x{baseline['cpu_ms_workers'] / this['cpu_ms_workers']:.2f}")
        total = lambda r: r["cpu_ms_server"] + r["cpu_ms_workers"] + r["cpu_ms_client"]  # noqa: E731
        parts.append(f"all CPU x{total(baseline) / total(this):.2f}")
    return "baseline/this: " + ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests-1k", type=int, default=400, help="requests per concurrency, 1 kB notes")
    parser.add_argument("--requests-10k", type=int, default=60, help="requests per concurrency, 10 kB notes")
    parser.add_argument("--soak", type=int, default=3000, help="requests of the RSS soak (1 kB, concurrency 8)")
    parser.add_argument("--big-mb", type=float, default=20, help="size of the streamed big notes (0: skip)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default="en")
    parser.add_argument("--baseline-ref", help="also run this commit's server, row by row beside this checkout's")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to run (default: all)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()

    # The latency runs give each server notes it has not seen (a note seen before finds what the workers'
    # caches keep of it, as no real request does): the first 40 warm it up, then each run its own.
    small = make_notes(WARM_UP + len(CONCURRENCIES) * args.requests_1k, 1000, 1)
    large = make_notes(len(CONCURRENCIES) * args.requests_10k, 10000, 2)
    results: dict = {"cores": os.cpu_count(), "workers": args.workers, "this": short_hash("HEAD")}
    soak: list = []
    with tempfile.TemporaryDirectory(prefix="hybriddeid-service-bench-") as tmp:
        work = Path(tmp)
        servers = {}
        if args.baseline_ref and "latency" in args.parts:
            results["baseline"] = export_ref(args.baseline_ref, work / "baseline")
            servers["baseline"] = start_server(work, args.model, args.workers, work / "baseline", "baseline")
        servers["this"] = start_server(work, args.model, args.workers)
        server, url, key = servers["this"]
        sampler = Sampler(server.pid)
        sampler.start()
        try:
            for _, base_url, base_key in servers.values():  # connections and first requests: not measured
                asyncio.run(load(base_url, base_key, small, WARM_UP, 2))
            print(
                f"hybriddeid serve, {args.workers} workers, {os.cpu_count()} cores shared with the client; "
                f"POST /v1/annotate, one note per request; this checkout {results['this']}"
                + (f", baseline {args.baseline_ref} ({results['baseline']})" if "baseline" in servers else "")
                + f"; load average {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            if "latency" in args.parts:
                turn = 0
                for label, notes, count, first in (
                    ("1 kB", small, args.requests_1k, WARM_UP),
                    ("10 kB", large, args.requests_10k, 0),
                ):
                    r = direct(args.model, notes, count, first)
                    results[f"{label} in-process"] = r
                    print(row(label, r) + "  (process_notes in this process, no HTTP: the floor)", flush=True)
                    for run, concurrency in enumerate(CONCURRENCIES):
                        names = list(servers) if turn % 2 == 0 else list(reversed(servers))
                        turn += 1
                        got = {}
                        for name in names:
                            process, server_url, server_key = servers[name]
                            got[name] = asyncio.run(
                                load(
                                    server_url,
                                    server_key,
                                    notes,
                                    count,
                                    concurrency,
                                    server_pid=process.pid,
                                    first=first + run * count,
                                )
                            )
                            print(row(label, got[name]) + (f"  ({name})" if len(servers) > 1 else ""), flush=True)
                        results[f"{label} c={concurrency}"] = got["this"]
                        if "baseline" in got:
                            results[f"{label} c={concurrency} baseline"] = got["baseline"]
                            print("    " + ratios(got["baseline"], got["this"]), flush=True)
            if "baseline" in servers:  # the rest is this checkout's alone
                servers["baseline"][0].send_signal(signal.SIGTERM)
                servers["baseline"][0].wait(timeout=120)
            if "batch" in args.parts:
                # Throughput against the batch command, back to back (the load on a shared machine drifts):
                # service, batch (the server idle meanwhile), service again.
                pair = [asyncio.run(load(url, key, small, args.requests_1k, 8, server_pid=server.pid))]
                print(row("1 kB", pair[0]) + "  (before the batch run)", flush=True)
                batch = batch_annotate(small[:200] * (args.requests_1k // 200 or 1), args.model, work)
                results["batch"] = batch
                print(
                    f"hybriddeid annotate --jobs 2 on {batch['notes']} of the same 1 kB notes as files: "
                    f"{batch['wall_s']:.1f} s whole ({batch['notes_per_s']:.1f} notes/s), "
                    f"{batch['notes_per_s_less_load']:.1f} notes/s less its {batch['load_s']:.1f} s model load "
                    f"(load {batch['load']})",
                    flush=True,
                )
                pair.append(asyncio.run(load(url, key, small, args.requests_1k, 8, server_pid=server.pid)))
                print(row("1 kB", pair[1]) + "  (after the batch run)", flush=True)
                results["1 kB c=8 around batch"] = pair
                for when, r in zip(("before", "after"), pair):
                    print(
                        f"service c=8 ({when}) / batch: x{r['notes_per_s'] / batch['notes_per_s']:.2f} whole batch "
                        f"run, x{r['notes_per_s'] / batch['notes_per_s_less_load']:.2f} less its model load"
                    )
            if "big" in args.parts and args.big_mb:
                # With the bulk lane (the default: big requests go to a low-priority worker of their own), then,
                # for comparison in this run, a server without it (--bulk-workers 0: every request shares the two).
                results["big notes"] = big_notes(url, key, small, args)
                no_lane = start_server(work, args.model, args.workers, name="no-lane", extra=("--bulk-workers", "0"))
                try:
                    asyncio.run(load(no_lane[1], no_lane[2], small, 40, 2))
                    results["big notes, no bulk lane"] = big_notes(
                        no_lane[1], no_lane[2], small, args, " (no bulk lane)"
                    )
                finally:
                    no_lane[0].send_signal(signal.SIGTERM)
                    no_lane[0].wait(timeout=120)
            if "soak" in args.parts:
                sampler.done = 0
                first = len(sampler.samples)
                r = asyncio.run(load(url, key, small, args.soak, 8, sampler, server_pid=server.pid))
                results["soak"] = r
                soak = sampler.samples[first:]
                print(row("soak 1 kB", r))
        finally:
            sampler.stop()
            for process, _, _ in servers.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    process.wait(timeout=120)
        if soak:
            tenth = max(1, len(soak) // 10)
            middle = len(soak) // 2 - tenth // 2
            mean = lambda part: float(np.mean([s[1] + s[2] for s in part]))  # noqa: E731
            first_mb, middle_mb, last_mb = mean(soak[:tenth]), mean(soak[middle : middle + tenth]), mean(soak[-tenth:])
            peak = max(s[1] + s[2] for s in soak)
            results["rss"] = {
                "samples": soak,
                "first_tenth_mb": first_mb,
                "middle_tenth_mb": middle_mb,
                "last_tenth_mb": last_mb,
                "peak_mb": peak,
            }
            print(
                f"RSS over the soak ({soak[-1][0]} of {args.soak} requests at the last sample, {len(soak)} samples "
                f"a second apart), server + workers: first tenth {first_mb:.0f} MB, middle tenth {middle_mb:.0f} MB, "
                f"last tenth {last_mb:.0f} MB ({last_mb - first_mb:+.0f} MB), peak {peak:.0f} MB; server alone "
                f"{soak[0][1]:.0f} -> {soak[-1][1]:.0f} MB, workers {soak[0][2]:.0f} -> {soak[-1][2]:.0f} MB"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=float))


if __name__ == "__main__":
    main()
