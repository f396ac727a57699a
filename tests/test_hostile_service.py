"""``hybriddeid serve`` against a hostile operator's probes (issue 44, items 1-5), each on a real server on
127.0.0.1 as tests/test_service.py runs it:

1. the service is no oracle of a batch run's surrogates and date shifts: each API key's requests get a
   key of their own, unless the server was started with --share-batch-key;
2. an API keys file others may write is refused, at start and when the running server rereads it;
3. a 422 never repeats a field name the client made up (nor any value);
4. connections are bounded: a header timeout, a keep-alive timeout, a cap that fits the open-file limit,
   and at most one log line a minute per kind of connection error, without tracebacks;
5. ``/docs`` loads nothing from a CDN (no page at all unless its files are given), and ``/docs``,
   ``/openapi.json`` and ``/metrics`` need a key unless named public.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

httpx = pytest.importorskip("httpx", reason="the service tests need hybriddeid[service] (httpx)")
pytest.importorskip("fastapi", reason="the service tests need hybriddeid[service] (FastAPI)")
pytest.importorskip("uvicorn", reason="the service tests need hybriddeid[service] (uvicorn)")
pytest.importorskip("prometheus_client", reason="the service tests need hybriddeid[service] (prometheus_client)")

from hybriddeid.cli import main  # noqa: E402
from hybriddeid.service.keys import add_key  # noqa: E402
from hybriddeid.surrogates.keys import render_key  # noqa: E402
from test_service import NAMES, SERVER, Server, assert_no_phi, free_port  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks workers and reads /proc")

PROBE = "Admission Date: 01/01/2020\nPatient: {name}. MRN {mrn}.\nSeen by Dr. Lindqvist.\n"
PATIENTS = {f"pt{i:02d}_note": PROBE.format(name=NAMES[i], mrn=4417920 + 37 * i) for i in range(3)}


def bearer(server, name: str = "alpha") -> dict[str, str]:
    return {"Authorization": f"Bearer {server.keys[name]}"}


def deid(server, name: str, mode: str = "surrogate") -> dict[str, str]:
    """The service's text for each probe note (its patient: its id, as a batch run takes the file name)."""
    answer = httpx.post(
        f"{server.url}/v1/deid",
        headers=bearer(server, name),
        timeout=60,
        json={"notes": [{"id": k, "text": v} for k, v in PATIENTS.items()], "mode": mode},
    )
    assert answer.status_code == 200, answer.text
    return {n["id"]: n["text"] for n in answer.json()["notes"]}


def dates(text: str) -> list[str]:
    return re.findall(r"\d{1,2}/\d{1,2}/\d{4}", text)


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A batch run released with the key, and the keys of two clients."""
    folder = tmp_path_factory.mktemp("hostile-service")
    notes = folder / "notes"
    notes.mkdir()
    for name, text in PATIENTS.items():
        (notes / f"{name}.txt").write_text(text, encoding="utf-8")
    key = folder / "surrogate.key"  # a fixed key: a chance match of two date shifts (1 in ~600) is ruled out once
    key.write_text(render_key(hashlib.sha256(b"test_hostile_service").digest()))
    key.chmod(0o600)
    assert (
        main(
            [
                "-q",
                "deid",
                str(notes),
                str(folder / "rel"),
                "--model",
                "en",
                "--mode",
                "surrogate",
                "--key-file",
                str(key),
            ]
        )
        == 0
    )
    keys = folder / "api-keys.json"
    made = {name: add_key(keys, name)[1] for name in ("alpha", "beta")}
    batch = {name: (folder / "rel" / f"{name}.txt").read_text(encoding="utf-8") for name in PATIENTS}
    return folder, keys, made, batch


@pytest.fixture(scope="module")
def service(released):
    """A server with every default: the key of the batch run, no options about access."""
    folder, keys, made, _ = released
    server = Server(folder, keys, "--workers", "1", "--bulk-workers", "0", "--rate-limit", "0")
    server.keys, server.keys_file = made, keys
    yield server
    server.stop()


# -- 1: no oracle ---------------------------------------------------------------------------------------
def test_the_service_cannot_be_probed_for_a_batch_runs_surrogates_or_date_shifts(service, released, tmp_path):
    _, _, _, batch = released
    for name, text in PATIENTS.items():
        assert dates(batch[name]) and dates(batch[name]) != dates(text), "the batch shifted the probe date"
    alpha, beta = deid(service, "alpha"), deid(service, "beta")
    for name in PATIENTS:
        # The released patient's date shift and surrogates are not those a probe gets back...
        assert dates(alpha[name]) != dates(batch[name]) and dates(beta[name]) != dates(batch[name]), name
        assert alpha[name] != batch[name] and beta[name] != batch[name]
        # ...nor another client's; each client's own are consistent across its requests.
        assert alpha[name] != beta[name]
    assert deid(service, "alpha") == alpha
    # Opting in by name gives the batch run's, and the log says what that risks.
    server = Server(released[0], released[1], "--workers", "1", "--bulk-workers", "0", "--share-batch-key")
    server.keys = released[2]
    try:
        assert deid(server, "alpha") == batch == deid(server, "beta")
    finally:
        server.stop()
    assert "--share-batch-key" in server.log() and "a client can learn them" in server.log()


# -- 2: the API keys file -------------------------------------------------------------------------------
def test_an_api_keys_file_others_may_write_is_refused_at_start(tmp_path):
    keys = tmp_path / "keys.json"
    add_key(keys, "etl")
    keys.chmod(0o666)
    # In a process of its own: a server that took the file would serve until stopped.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hybriddeid.cli",
            "serve",
            "--api-keys",
            str(keys),
            "--workers",
            "1",
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )  # the installed package (with its resources), not ./hybriddeid
    assert done.returncode == 2 and str(keys) in done.stderr and "chmod 600" in done.stderr, done.stderr
    # The keys commands refuse it too: rewriting it owner-only would keep a record someone else slipped in.
    assert main(["-q", "serve", "keys", "add", "other", "--api-keys", str(keys)]) == 2
    assert main(["-q", "serve", "keys", "list", "--api-keys", str(keys)]) == 2


def test_a_key_slipped_into_a_world_writable_keys_file_is_not_loaded(service, tmp_path):
    keys = service.keys_file
    original = keys.read_text()
    _, intruder = add_key(tmp_path / "theirs.json", "intruder")
    theirs = json.loads((tmp_path / "theirs.json").read_text())["keys"]
    assert httpx.get(f"{service.url}/v1/models", headers=bearer(service)).status_code == 200
    try:
        keys.chmod(0o666)
        time.sleep(1.5)  # the server notices the change of mode
        body = json.loads(original)
        body["keys"] += theirs
        with keys.open("w") as handle:  # written in place, as a local user who may write it would
            handle.write(json.dumps(body))
        time.sleep(2.5)  # the server rereads a changed file within a second
        assert httpx.get(f"{service.url}/v1/models", headers={"Authorization": f"Bearer {intruder}"}).status_code == 401
        assert httpx.get(f"{service.url}/v1/models", headers=bearer(service)).status_code == 200  # the keys read last
    finally:  # put back as `serve keys` writes it: a new owner-only file in its place
        restored = tmp_path / "restored.json"
        restored.write_text(original)
        restored.chmod(0o600)
        os.replace(restored, keys)
    refused = [line for line in service.log().splitlines() if "read or written by others" in line]
    assert 1 <= len(refused) <= 2 and str(keys) in refused[0], refused  # told once per version of the file


# -- 3: 422 answers ---------------------------------------------------------------------------------------
def test_a_422_repeats_no_field_name_the_client_made_up(service):
    planted = NAMES[1]
    for body in (
        {planted: "x", "text": "a"},
        {"notes": [{"id": "a", "text": "b", planted: 1}]},
        {"text": "a", "mode": planted},
        {"notes": {planted: 1}},
    ):
        answer = httpx.post(f"{service.url}/v1/deid", json=body, headers=bearer(service))
        assert answer.status_code == 422, body
        assert planted not in answer.text and "Ambrith" not in answer.text, answer.text
    details = httpx.post(
        f"{service.url}/v1/deid", json={"notes": [{"text": "b", planted: 1}]}, headers=bearer(service)
    ).json()["details"]
    assert details == [
        {"loc": ["notes", 0, "(unknown field)"], "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}
    ]


# -- 5: /docs, /openapi.json, /metrics -------------------------------------------------------------------
def test_docs_openapi_and_metrics_need_a_key_and_docs_load_nothing_from_elsewhere(service, released, tmp_path):
    for route in ("/openapi.json", "/metrics"):
        assert httpx.get(f"{service.url}{route}").status_code == 401, route
        assert httpx.get(f"{service.url}{route}", headers=bearer(service)).status_code == 200, route
    for route in ("/docs", "/redoc"):  # no page without its files: never Swagger UI from a CDN
        assert httpx.get(f"{service.url}{route}", headers=bearer(service)).status_code == 404, route
    assets = tmp_path / "swagger"
    assets.mkdir()
    (assets / "swagger-ui-bundle.js").write_text("window.SwaggerUIBundle = function () {};\n")
    (assets / "swagger-ui.css").write_text("body {}\n")
    assert main(["-q", "serve", "--api-keys", str(released[1]), "--docs-assets", str(tmp_path)]) == 2  # no files
    server = Server(
        released[0],
        released[1],
        "--workers",
        "1",
        "--bulk-workers",
        "0",
        "--docs-assets",
        str(assets),
        "--public-route",
        "/docs",
        "--public-route",
        "/openapi.json",
    )
    server.keys = released[2]
    try:
        page = httpx.get(f"{server.url}/docs")
        assert page.status_code == 200 and "/docs/swagger-ui-bundle.js" in page.text
        assert not re.search(r"(src|href)=\"(https?:)?//", page.text), "the page loads something from elsewhere"
        assert httpx.get(f"{server.url}/docs/swagger-ui-bundle.js").text == "window.SwaggerUIBundle = function () {};\n"
        assert httpx.get(f"{server.url}/openapi.json").json()["paths"]
        assert httpx.get(f"{server.url}/metrics").status_code == 401  # public only when named
        assert httpx.get(f"{server.url}/docs/..%2Fapi-keys.json").status_code == 404
    finally:
        server.stop()


# -- 4: connections ---------------------------------------------------------------------------------------
OPEN_FILES = 256
LIMITED = f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, ({OPEN_FILES}, {OPEN_FILES}))\n" + SERVER


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (reading what it may send first)."""
    sock.settimeout(within)
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:  # closed with bytes of ours unread
        return True
    except TimeoutError:
        return False
    return False


def test_idle_connections_are_closed_capped_and_logged_once_a_minute(released):
    folder, keys, made, _ = released
    server = Server(
        folder,
        keys,
        "--workers",
        "1",
        "--bulk-workers",
        "0",
        "--header-timeout",
        "2",
        "--keep-alive-timeout",
        "1",
        script=LIMITED,
    )
    server.keys = made
    sockets: list[socket.socket] = []
    try:
        # Three times as many idle connections as the open-file limit: the server keeps to its cap...
        for _ in range(3 * OPEN_FILES):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            sockets.append(sock)
        assert open_files(server.process.pid) < OPEN_FILES
        # ...and a client with a key still gets in while they are held.
        answer = httpx.get(f"{server.url}/v1/models", headers=bearer(server), timeout=10)
        assert answer.status_code == 200
        assert open_files(server.process.pid) < OPEN_FILES
        for sock in sockets:
            sock.close()
        # Header timeout: a connection that sends nothing, or its headers a byte at a time, is closed.
        silent = socket.create_connection(("127.0.0.1", server.port))
        slow = socket.create_connection(("127.0.0.1", server.port))
        started = time.monotonic()
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):
            time.sleep(0.5)
            slow.sendall(b"X")
        assert closed_by_server(silent, 4) and closed_by_server(slow, 4)
        assert time.monotonic() - started < 5
        # Keep-alive timeout: an idle connection is closed a second after its answer.
        kept = socket.create_connection(("127.0.0.1", server.port))
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200 OK" in kept.recv(65536)
        started = time.monotonic()
        assert closed_by_server(kept, 3) and time.monotonic() - started < 2.5
        # Bad requests by the dozen: one log line, no traceback.
        for _ in range(30):
            with socket.create_connection(("127.0.0.1", server.port)) as bad:
                bad.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                bad.recv(65536)
        assert httpx.get(f"{server.url}/healthz").status_code == 200
    finally:
        for sock in sockets:
            sock.close()
        server.stop()
    log = server.log()
    assert "Traceback" not in log and "out of system resource" not in log  # accept() never ran out of files
    assert log.count("Invalid HTTP request received") == 1
    assert log.count("connections open (--max-connections)") <= 2  # two kinds: an idle one closed, a new one refused
    assert "allows no more" in log  # the default cap was lowered to fit the open-file limit, and said so
    assert_no_phi(log)
