"""SIGTERM drains: a running request still completes, new connections are refused, exit code 0."""

import signal
import socket
import threading

from kestrel_e2e import SHUTDOWN_TIMEOUT_S, metric, post_json, scrape, wait_for


def connect_refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except (ConnectionRefusedError, ConnectionResetError):
        # Reset: the connection reached the backlog just as the listener closed; it is not served either.
        return True
    return False


MAX_TOKENS = 200  # long enough (seconds on two cores) for the drain to be observed


def test_sigterm_finishes_running_request(start_server):
    srv = start_server()
    result = {}

    def long_request():
        result["resp"] = post_json(srv.base_url, "/v1/completions",
                                   {"model": srv.model, "prompt": "The capital of France is",
                                    "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 0},
                                   timeout=SHUTDOWN_TIMEOUT_S + 10)

    worker = threading.Thread(target=long_request)
    worker.start()
    assert wait_for(lambda: metric(scrape(srv.base_url), "vllm:num_requests_running") == 1, 10)
    srv.proc.send_signal(signal.SIGTERM)

    # While the request drains, new connections are refused (uvicorn closes its listener first).
    refused = wait_for(lambda: connect_refused(srv.port), 1.0, interval=0.05)
    if worker.is_alive():
        assert refused, "the server still accepts connections while draining"

    worker.join(SHUTDOWN_TIMEOUT_S)
    assert not worker.is_alive(), "the running request did not finish within the grace period"
    status, resp = result["resp"]
    assert status == 200, resp
    assert resp["usage"]["completion_tokens"] == MAX_TOKENS
    assert resp["choices"][0]["finish_reason"] == "length"
    assert "Paris" in resp["choices"][0]["text"]
    assert srv.proc.wait(SHUTDOWN_TIMEOUT_S) == 0, srv.log()[-4000:]
    assert connect_refused(srv.port)
    assert "Application shutdown complete." in srv.log()
