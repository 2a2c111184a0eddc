"""The app-side server handle: dropping it or stopping it ends the server process, and the
server refuses a taken port before it starts a cluster."""

import gc
import socket
import subprocess
import sys

from dilaserve.serve.launcher import ServerHandle, serve_command


def _fake_server(tmp_path):
    # A stand-in process: what is under test is the handle's lifecycle, not the server.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    return ServerHandle(proc, port=1, log_path=tmp_path / "log")


def test_dropping_the_handle_terminates_the_server(tmp_path):
    handle = _fake_server(tmp_path)
    proc = handle.proc
    del handle
    gc.collect()
    assert proc.wait(timeout=10) == -15


def test_stop_is_idempotent_and_reports_the_exit_code(tmp_path):
    handle = _fake_server(tmp_path)
    assert handle.alive and not handle.healthy()  # nothing listens on port 1
    assert handle.stop(timeout_s=10) == -15
    assert handle.stop() == -15 and not handle.alive
    assert handle.log_tail() == ""  # no log file written: empty, not an error


def test_serve_command_passes_flags_through():
    cmd = serve_command(8123, "some/artifacts", ["--reconfig-interval-s", 0])
    assert cmd[1:] == [
        "-m",
        "dilaserve.serve",
        "--port",
        "8123",
        "--artifacts",
        "some/artifacts",
        "--reconfig-interval-s",
        "0",
    ]


def test_a_taken_port_is_an_error_before_any_cluster_starts(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        out = subprocess.run(
            serve_command(port, str(tmp_path / "no-artifacts"), []),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"error: cannot listen on 127.0.0.1:{port}" in out.stderr
    assert "Traceback" not in out.stderr and "Ray" not in out.stderr  # refused before Ray started
