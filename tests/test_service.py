"""``hybriddeid serve`` run for real on 127.0.0.1 and called over HTTP: every route, API keys (missing,
wrong, revoked), the rate limit, each limit (413, 422, 504), a worker that crashes, a graceful stop with
requests in flight, no PHI in the server's log, and answers identical to ``hybriddeid annotate``/``deid``.

The server runs in its own process with ``Pipeline.predict`` sabotaged on marker notes (as
tests/test_hostile.py does to batch workers): SABOTAGE-SEGV kills its worker with SIGSEGV, SABOTAGE-HANG
sleeps past the time limit, SABOTAGE-SLOW takes two seconds, SABOTAGE-MEMORY asks for more than the
worker's memory limit; other notes are processed as ever.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="the service tests need hybriddeid[service] (httpx)")
pytest.importorskip("fastapi", reason="the service tests need hybriddeid[service] (FastAPI)")
pytest.importorskip("uvicorn", reason="the service tests need hybriddeid[service] (uvicorn)")
pytest.importorskip("prometheus_client", reason="the service tests need hybriddeid[service] (prometheus_client)")

from hybriddeid.cli import main  # noqa: E402
from hybriddeid.client import Client, ServiceError  # noqa: E402
from hybriddeid.service.keys import add_key, read_keys, revoke_key  # noqa: E402
from hybriddeid.service.limits import RateLimiter  # noqa: E402
from hybriddeid.service.work import client_key  # noqa: E402
from hybriddeid.surrogates.keys import read_key, render_key  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks workers and reads /proc")

SERVER = """
import faulthandler, os, signal, sys, time
from hybriddeid.pipeline.core import Pipeline
predict = Pipeline.predict
def sabotaged(self, doc, *args, **kwargs):
    text = getattr(doc, "text", doc)
    if "SABOTAGE-SEGV" in text:
        faulthandler.disable()  # a deliberate crash: no fault dump
        os.kill(os.getpid(), signal.SIGSEGV)
    if "SABOTAGE-HANG" in text:
        time.sleep(60)
    if "SABOTAGE-SLOW" in text:
        time.sleep(2)
    if "SABOTAGE-MEMORY" in text:
        bytearray(8 * 2**30)  # past the worker's 4 GB address space: MemoryError
    return predict(self, doc, *args, **kwargs)
Pipeline.predict = sabotaged
from hybriddeid.cli import main
sys.exit(main())
"""

# Planted PHI: none of it may reach the server's log, whatever the request's fate.
NAMES = ["Quorvendale Zibbinshaw", "Ambrith Pellworth", "Teodric Andravi", "Marisol Okonkwo"]


def note(i: int) -> str:
    return (
        f"Patient {NAMES[i % 4]} was seen on {1 + i % 12:02d}/{1 + i % 28:02d}/2023 by Dr. Lindqvist.\n"
        f"MRN {4417920 + 37 * i}. Phone (617) 555-{1000 + i:04d}.\nLives in Boston, MA.\n"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """``hybriddeid serve`` in its own process group, its log (stderr) in a file."""

    def __init__(
        self,
        folder: Path,
        keys: Path,
        *options: str,
        surrogate_key: bool = True,
        scheme: str = "http",
        verify: bool | str = True,
        script: str = SERVER,
    ) -> None:
        self.port = free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.log_path = folder / f"server-{self.port}.log"
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                script,
                "serve",
                "--model",
                "en",
                "--port",
                str(self.port),
                "--api-keys",
                str(keys),
                *(["--key-file", str(folder / "surrogate.key")] if surrogate_key else []),
                *options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log_path.open("wb"),
            cwd=folder,
            start_new_session=True,
        )
        context = ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log()
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2, verify=context).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the server did not get ready: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    folder = tmp_path_factory.mktemp("service")
    keys = folder / "api-keys.json"
    made = {name: add_key(keys, name)[1] for name in ("alpha", "beta")}
    made["rate"] = add_key(keys, "rate", rate_limit=60)[1]  # its own rate; the others' is none
    server = Server(
        folder,
        keys,
        "--workers",
        "2",
        "--request-timeout",
        "4",
        "--max-body-mb",
        "1",
        "--max-note-chars",
        "60000",
        "--max-notes",
        "5",
        "--rate-limit",
        "0",
        "--burst",
        "20",
    )
    server.keys_file, server.keys, server.folder = keys, made, folder
    yield server
    server.stop()


def post(service, route: str, body, key: str = "alpha", **kwargs) -> httpx.Response:
    headers = {"Authorization": f"Bearer {service.keys[key]}"} if key else {}
    if isinstance(body, (dict, list)):
        kwargs["json"] = body
    else:
        kwargs["content"] = body
        headers["Content-Type"] = "application/json"
    kwargs.setdefault("timeout", 60)
    return httpx.post(f"{service.url}{route}", headers=headers, **kwargs)


def metrics_text(service, key: str = "alpha") -> str:
    """/metrics, which needs an API key unless the server makes it public."""
    return httpx.get(f"{service.url}/metrics", headers={"Authorization": f"Bearer {service.keys[key]}"}).text


def metric(service, name: str) -> float:
    """The sum of a metric's samples (all labels) in /metrics."""
    text = metrics_text(service)
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


# -- routes ------------------------------------------------------------------------------------------
def test_health_readiness_models_openapi_and_metrics(service):
    assert httpx.get(f"{service.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{service.url}/readyz").json() == {"status": "ready", "workers": 2, "bulk_workers": 1, "alive": 3}
    models = httpx.get(f"{service.url}/v1/models", headers={"Authorization": f"Bearer {service.keys['alpha']}"}).json()
    assert models["language"] == "en" and "PATIENT" in models["labels"] and models["phi_sets"] == ["i2b2-2014", "hipaa"]
    assert models["modes"] == ["tag", "mask", "surrogate"] and models["version"]
    schema = httpx.get(
        f"{service.url}/openapi.json", headers={"Authorization": f"Bearer {service.keys['alpha']}"}
    ).json()
    assert {"/v1/annotate", "/v1/deid", "/v1/models", "/healthz", "/readyz", "/metrics"} <= set(schema["paths"])
    body = schema["paths"]["/v1/deid"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/DeidRequest"}
    assert "mode" in schema["components"]["schemas"]["DeidRequest"]["properties"]
    assert "Note" in schema["components"]["schemas"]
    before = metric(service, "hybriddeid_notes_total")
    answer = post(service, "/v1/annotate", {"notes": [{"id": "a", "text": note(0)}, {"id": "b", "text": note(1)}]})
    assert answer.status_code == 200
    assert [n["id"] for n in answer.json()["notes"]] == ["a", "b"]
    assert metric(service, "hybriddeid_notes_total") == before + 2
    text = metrics_text(service)
    assert 'hybriddeid_requests_total{route="/v1/annotate",status="200"}' in text
    assert 'hybriddeid_request_duration_seconds_bucket{le="0.5",route="/v1/annotate"}' in text
    assert "hybriddeid_workers_alive 3.0" in text  # two regular workers and the bulk one


def test_deid_modes_and_patients(service):
    texts = {"n1": note(0), "n2": note(4)}  # one patient's name in both
    tagged = post(
        service, "/v1/deid", {"notes": [{"id": k, "text": v} for k, v in texts.items()], "mode": "tag"}
    ).json()
    assert "[**NAME**]" in tagged["notes"][0]["text"] and NAMES[0] not in tagged["notes"][0]["text"]
    masked = post(service, "/v1/deid", {"text": note(0), "mode": "mask"}).json()["notes"][0]
    assert "*" * len("Quorvendale") in masked["text"]
    for rep in masked["replacements"]:  # output offsets, no original text
        assert masked["text"][rep["out_start"] : rep["out_end"]] == rep["replacement"] and "original" not in rep
    twice = [
        post(service, "/v1/deid", {"text": note(0), "mode": "surrogate", "patient": "p-17"}).json() for _ in range(2)
    ]
    assert twice[0] == twice[1], "the same patient gets the same surrogates across requests"
    other = post(service, "/v1/deid", {"text": note(0), "mode": "surrogate", "patient": "p-18"}).json()
    assert other["notes"][0]["text"] != twice[0]["notes"][0]["text"]
    assert twice[0]["notes"][0]["patient"] == "p-17"


# -- access ------------------------------------------------------------------------------------------
def test_missing_wrong_and_revoked_keys(service):
    body = {"text": note(2)}
    missing = post(service, "/v1/annotate", body, key="")
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"] == "unauthorized"
    for wrong in ("nonsense", service.keys["alpha"][:-4] + "AAAA", "hdk_00000000_" + "A" * 43):
        answer = httpx.post(f"{service.url}/v1/annotate", json=body, headers={"Authorization": f"Bearer {wrong}"})
        assert answer.status_code == 401, wrong
    assert httpx.get(f"{service.url}/v1/models", headers={"Authorization": "Basic abc"}).status_code == 401
    assert post(service, "/v1/annotate", body, key="beta").status_code == 200
    assert main(["-q", "serve", "keys", "revoke", "beta", "--api-keys", str(service.keys_file)]) == 0
    deadline = time.monotonic() + 10  # the server rereads the file within a second
    while (
        status := post(service, "/v1/annotate", body, key="beta").status_code
    ) == 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status == 403
    assert post(service, "/v1/annotate", body, key="beta").json()["error"] == "forbidden"
    assert post(service, "/v1/annotate", body).status_code == 200  # the others' keys still work


def test_keys_file_holds_salted_hashes_only(tmp_path, capsys):
    keys = tmp_path / "keys.json"
    assert main(["-q", "serve", "keys", "add", "etl", "--api-keys", str(keys)]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("hdk_")
    record, second = add_key(keys, "portal")
    stored = keys.read_text()
    assert printed not in stored and second not in stored and printed.split("_", 2)[2] not in stored
    salts = [r.salt for r in read_keys(keys)]
    assert len(set(salts)) == 2 and all(len(salt) == 32 for salt in salts)
    assert keys.stat().st_mode & 0o077 == 0
    with pytest.raises(ValueError, match="exists"):
        add_key(keys, "etl")
    with pytest.raises(ValueError, match="key name"):
        add_key(keys, "bad name!")
    assert main(["-q", "serve", "keys", "add", "bulk", "--rate-limit", "6", "--api-keys", str(keys)]) == 0
    capsys.readouterr()
    assert main(["-q", "serve", "keys", "list", "--api-keys", str(keys)]) == 0
    listed = capsys.readouterr().out
    assert "etl\t" in listed and "portal\t" in listed and "live" in listed and printed not in listed
    assert "bulk\t" in listed and "\t6/min\t" in listed and "server's rate" in listed
    assert [r.name for r in revoke_key(keys, record.id)] == ["portal"]
    with pytest.raises(ValueError, match="no live key"):
        revoke_key(keys, "portal")
    assert main(["-q", "serve", "--api-keys", str(tmp_path / "none" / "x.json"), "--workers", "0"]) == 2


def test_rate_limit_answers_429_with_retry_after(service):
    codes, waits = [], []
    for _ in range(30):  # burst 20 at one a second: the 21st within the burst's second is refused
        answer = httpx.get(f"{service.url}/v1/models", headers={"Authorization": f"Bearer {service.keys['rate']}"})
        codes.append(answer.status_code)
        if answer.status_code == 429:
            waits.append(int(answer.headers["retry-after"]))
            assert answer.json()["error"] == "rate_limited"
    assert codes[:20] == [200] * 20 and 429 in codes
    assert all(wait >= 1 for wait in waits)
    for _ in range(25):  # per key: alpha (no limit of its own, the server's none) goes on
        assert (
            httpx.get(
                f"{service.url}/v1/models", headers={"Authorization": f"Bearer {service.keys['alpha']}"}
            ).status_code
            == 200
        )


def test_rate_limiter_buckets():
    now = [0.0]
    limiter = RateLimiter(per_minute=60, burst=3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(1.0)  # one a second: the next in a second
    assert limiter.take("b") == 0.0  # every key its own bucket
    now[0] = 1.0
    assert limiter.take("a") == 0.0 and limiter.take("a") > 0
    assert limiter.take("c", per_minute=600) == 0.0  # a key's own rate
    assert all(limiter.take("d", per_minute=0) == 0.0 for _ in range(100))  # none
    assert all(RateLimiter(0, 1).take("e") == 0.0 for _ in range(100))


# -- limits ------------------------------------------------------------------------------------------
def test_size_and_count_limits_answer_413(service):
    big = "x" * (2 * 2**20)
    answer = post(service, "/v1/annotate", {"text": big})
    assert answer.status_code == 413 and "--max-body-mb" in answer.json()["message"]

    def chunks():  # no Content-Length: refused as it comes
        for _ in range(40):
            yield b" " * 65536

    chunked = post(service, "/v1/annotate", chunks())
    assert chunked.status_code == 413
    long_note = post(service, "/v1/annotate", {"notes": [{"id": "long", "text": NAMES[0] + " " * 70000}]})
    assert long_note.status_code == 413 and "'long'" in long_note.json()["message"]
    assert NAMES[0] not in long_note.text
    many = post(service, "/v1/deid", {"notes": [{"text": note(i)} for i in range(6)]})
    assert many.status_code == 413 and "at most 5" in many.json()["message"]


def test_invalid_bodies_answer_422_without_echoing_text(service):
    planted = NAMES[1]
    for body in (
        f'{{"text": "{planted}"',
        f'{{"text": "{planted}", "notes": []}}',
        f'{{"text": "{planted}", "mode": "{planted}"}}',
        f'{{"txt": "{planted}"}}',
        f'["{planted}"]',
        f'{{"notes": [{{"id": "a", "text": "{planted}"}}, {{"id": "a", "text": "x"}}]}}',
        f'{{"text": "{planted}", "threshold": 2}}',
        '{"text": "\\ud800"}',
    ):
        route = "/v1/deid" if "mode" in body else "/v1/annotate"
        answer = post(service, route, body.encode())
        assert answer.status_code == 422, body
        assert answer.json()["error"] == "invalid"
        assert planted not in answer.text and "Quorvendale" not in answer.text


def test_a_request_past_the_time_limit_answers_504_and_its_worker_is_replaced(service):
    restarts = metric(service, "hybriddeid_worker_restarts_total")
    started = time.monotonic()
    answer = post(service, "/v1/annotate", {"text": f"SABOTAGE-HANG {NAMES[2]}"})
    assert answer.status_code == 504 and answer.json()["error"] == "timeout" and answer.json()["error_id"]
    assert time.monotonic() - started < 15
    assert metric(service, "hybriddeid_worker_restarts_total") == restarts + 1
    assert post(service, "/v1/annotate", {"text": note(5)}).status_code == 200
    assert httpx.get(f"{service.url}/readyz").status_code == 200


def test_a_caller_that_leaves_frees_its_worker(service):
    restarts = metric(service, "hybriddeid_worker_restarts_total")
    with pytest.raises(httpx.ReadTimeout):
        post(service, "/v1/annotate", {"text": f"SABOTAGE-HANG {NAMES[2]}"}, timeout=0.5)
    deadline = time.monotonic() + 2.5  # well before the 4 s time limit would end it
    while metric(service, "hybriddeid_worker_restarts_total") == restarts and time.monotonic() < deadline:
        time.sleep(0.1)
    assert metric(service, "hybriddeid_worker_restarts_total") == restarts + 1
    assert "the client disconnected before its answer" in service.log()
    assert post(service, "/v1/annotate", {"text": note(5)}).status_code == 200


def test_a_crashing_worker_fails_its_request_alone(service):
    expected = post(service, "/v1/annotate", {"text": note(6)}).json()
    results: dict[str, httpx.Response] = {}

    def call(name: str, text: str) -> None:
        results[name] = post(service, "/v1/annotate", {"text": text})

    threads = [threading.Thread(target=call, args=("crash", f"SABOTAGE-SEGV {NAMES[3]}"))]
    threads += [threading.Thread(target=call, args=(f"ok{i}", note(6))) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    crash = results["crash"]
    assert crash.status_code == 500 and crash.json()["error"] == "worker_failed"
    assert "SIGSEGV" in crash.json()["message"] and NAMES[3] not in crash.text
    assert crash.json()["error_id"] in service.log()
    assert [results[f"ok{i}"].json() for i in range(4)] == [expected] * 4
    deadline = time.monotonic() + 10
    while httpx.get(f"{service.url}/readyz").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert httpx.get(f"{service.url}/readyz").json()["alive"] == 3


def children(server: Server) -> list[int]:
    return [
        int(pid) for pid in Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children").read_text().split()
    ]


def niceness(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def test_a_big_request_goes_to_the_bulk_worker_and_never_holds_up_small_ones(service, tmp_path):
    server = Server(tmp_path, service.keys_file, "--workers", "1", "--bulk-workers", "1", "--bulk-over-mb", "0.01")
    server.keys = service.keys
    try:
        workers = children(server)
        assert httpx.get(f"{server.url}/readyz").json() == {
            "status": "ready",
            "workers": 1,
            "bulk_workers": 1,
            "alive": 2,
        }
        assert sorted(niceness(pid) - niceness(server.process.pid) for pid in workers) == [0, 10]
        big_text = f"SABOTAGE-SLOW {note(7)}" + "Stable overnight. " * 700  # 12 kB: over the 0.01 MB bulk limit
        finished: list[str] = []
        big = threading.Thread(
            target=lambda: finished.append(("big", post(server, "/v1/annotate", {"text": big_text})))
        )
        big.start()
        deadline = time.monotonic() + 10
        while metric(server, "hybriddeid_bulk_requests_total") < 1:
            assert time.monotonic() < deadline, "the big request never reached the bulk lane"
            time.sleep(0.05)
        # The only regular worker is free: three small notes are answered while the big one (2 s) is worked on.
        smalls = [post(server, "/v1/annotate", {"text": note(i)}) for i in range(3)]
        finished.extend(("small", answer) for answer in smalls)
        big.join()
        assert [name for name, _ in finished] == ["small"] * 3 + ["big"]
        assert all(answer.status_code == 200 for _, answer in finished)
        assert any(span["label"] == "PATIENT" for span in finished[-1][1].json()["notes"][0]["spans"])
        assert metric(server, "hybriddeid_bulk_requests_total") == 1
    finally:
        server.stop()


def test_a_request_past_the_memory_limit_fails_alone_and_its_worker_is_replaced(service):
    restarts = metric(service, "hybriddeid_worker_restarts_total")
    answer = post(service, "/v1/annotate", {"text": f"SABOTAGE-MEMORY {NAMES[0]}"})
    assert answer.status_code == 500 and answer.json()["error"] == "worker_failed"
    assert "out of memory" in answer.json()["message"] and NAMES[0] not in answer.text
    assert metric(service, "hybriddeid_worker_restarts_total") == restarts + 1
    assert post(service, "/v1/annotate", {"text": note(5)}).status_code == 200


# -- same output as the batch commands ---------------------------------------------------------------------
def test_answers_are_byte_identical_to_annotate_and_deid(service, tmp_path):
    notes = tmp_path / "in"
    notes.mkdir()
    texts = {f"pt{i:02d}_note": note(i) for i in range(5)}
    for name, text in texts.items():
        (notes / f"{name}.txt").write_text(text, encoding="utf-8")
    key = str(service.folder / "surrogate.key")
    client = tmp_path / "alpha.key"  # the surrogate key the server draws for alpha's requests
    client.write_text(render_key(client_key(read_key(Path(key)), "alpha")))
    client.chmod(0o600)
    assert main(["-q", "annotate", str(notes), str(tmp_path / "ann"), "--model", "en", "--format", "jsonl"]) == 0
    batch = [
        json.loads(line)
        for path in sorted((tmp_path / "ann").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    given = [{"id": name, "text": text} for name, text in texts.items()]
    served = post(service, "/v1/annotate", {"notes": given}).json()["notes"]
    assert [record["name"] for record in batch] == [n["id"] for n in served]
    for record, answer in zip(batch, served):
        assert json.dumps(answer["spans"]) == json.dumps(record["spans"]) and record["spans"]
    for mode, key_file in (("surrogate", str(client)), ("tag", key)):
        out = tmp_path / f"deid-{mode}"
        assert main(["-q", "deid", str(notes), str(out), "--model", "en", "--mode", mode, "--key-file", key_file]) == 0
        served = post(service, "/v1/deid", {"notes": given, "mode": mode}).json()["notes"]
        for answer in served:
            assert answer["text"].encode("utf-8") == (out / f"{answer['id']}.txt").read_bytes(), (mode, answer["id"])
            audit = [json.loads(line) for line in (out / "audit" / f"{answer['id']}.jsonl").read_text().splitlines()]
            assert [{k: v for k, v in row.items() if k != "note"} for row in audit[1:]] == answer["replacements"]


def test_the_python_client(service):
    with Client(service.url, service.keys["alpha"]) as client:
        assert client.ready()
        assert client.models()["language"] == "en"
        spans = client.annotate(note(7))[0]["spans"]
        assert any(span["label"] in ("PATIENT", "DOCTOR") for span in spans)
        done = client.deid([{"id": "x", "text": note(7)}, note(8)], mode="tag")
        assert [n["id"] for n in done] == ["x", "1"] and "[**" in done[0]["text"]
    with Client(service.url, "hdk_00000000_" + "A" * 43) as client, pytest.raises(ServiceError) as caught:
        client.annotate(note(7))
    assert caught.value.status == 401 and caught.value.kind == "unauthorized"


# -- stopping ------------------------------------------------------------------------------------------
def test_sigterm_finishes_the_requests_in_flight(service, tmp_path):
    server = Server(tmp_path, service.keys_file, "--workers", "2")
    workers = children(server)
    assert len(workers) == 3  # two and the bulk worker
    results: list[httpx.Response | Exception] = []

    def call(i: int) -> None:
        try:
            results.append(post(server, "/v1/deid", {"text": f"SABOTAGE-SLOW {note(i)}", "mode": "tag"}))
        except Exception as exc:  # noqa: BLE001 - told by the assertion below
            results.append(exc)

    server.keys = service.keys
    threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while "hybriddeid_requests_in_flight 3.0" not in metrics_text(server):  # 2 + this one
        assert time.monotonic() < deadline, "the requests never got in flight"
        time.sleep(0.05)
    server.process.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    with pytest.raises(httpx.TransportError):  # no new connections once stopping
        httpx.get(f"{server.url}/healthz", timeout=2)
    for thread in threads:
        thread.join()
    assert server.process.wait(timeout=30) == 0
    assert [r.status_code if isinstance(r, httpx.Response) else repr(r) for r in results] == [200, 200]
    assert all("[**NAME**]" in r.json()["notes"][0]["text"] for r in results)
    time.sleep(0.5)
    assert not [
        pid
        for pid in workers
        if Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    ]
    assert "the requests in flight were answered first" in server.log()
    assert_no_phi(server.log())


def test_https_with_uvicorns_certificate_options_and_no_surrogates_without_a_key(service, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    try:
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
                "-keyout",
                str(key),
                "-out",
                str(cert),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no openssl to make a test certificate ({type(exc).__name__})")
    server = Server(
        tmp_path,
        service.keys_file,
        "--workers",
        "1",
        "--ssl-certfile",
        str(cert),
        "--ssl-keyfile",
        str(key),
        surrogate_key=False,
        scheme="https",
        verify=str(cert),
    )
    try:
        with Client(server.url, service.keys["alpha"], verify=str(cert)) as client:
            assert client.models()["modes"] == ["tag", "mask"]
            assert "[**" in client.deid(note(9), mode="tag")[0]["text"]
            with pytest.raises(ServiceError) as caught:
                client.deid(note(9), mode="surrogate")
        assert caught.value.status == 422 and "--key-file" in caught.value.message
        with pytest.raises(httpx.TransportError):  # plain HTTP is not served on the TLS port
            httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)
    finally:
        server.stop()
    assert server.process.returncode == 0
    assert_no_phi(server.log())


def assert_no_phi(log: str) -> None:
    for name in NAMES:
        for word in name.split():
            assert word not in log, f"{word!r} in the server's log"
    assert "Boston" not in log and "555-" not in log and "Lindqvist" not in log


def test_no_phi_in_the_servers_log(service):
    """Last in this module: every request above (answered, refused, crashed, timed out) left its line."""
    log = service.log()
    assert "POST /v1/annotate 200" in log and "POST /v1/deid 413" in log and "POST /v1/annotate 504" in log
    assert "POST /v1/annotate 500" in log and "key=alpha" in log and "GET /v1/models 429" in log
    assert_no_phi(log)
