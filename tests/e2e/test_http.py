"""HTTP/1.1 transport details clients rely on: keep-alive with requests arriving in several TCP segments,
pipelined requests, Connection: close."""

import json
import socket
import time

from kestrel_e2e import request

TEXT_WORDS = 240  # a ~1.3 kB request, like a typical SDK call


class RawConnection:
    """One keep-alive TCP connection speaking HTTP/1.1 by hand (Content-Length bodies only)."""

    def __init__(self, base_url):
        port = int(base_url.rsplit(":", 1)[1])
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data, pause_at=None):
        """Sends `data`; with pause_at, as two TCP segments with a short pause between them."""
        if pause_at is None:
            self.sock.sendall(data)
            return
        self.sock.sendall(data[:pause_at])
        time.sleep(0.003)
        self.sock.sendall(data[pause_at:])

    def read_response(self):
        while b"\r\n\r\n" not in self.buf:
            self._recv()
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = int(headers["content-length"])
        while len(rest) < length:
            self._recv()
            rest = self.buf.split(b"\r\n\r\n", 1)[1]
        self.buf = rest[length:]
        return status, headers, rest[:length]

    def _recv(self):
        data = self.sock.recv(65536)
        assert data, f"server closed the connection; buffered: {self.buf[:200]!r}"
        self.buf += data


def tokenize_request(words):
    body = json.dumps({"prompt": "word " * words, "add_special_tokens": False}).encode()
    head = (f"POST /tokenize HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return head + body, len(head)


def check_tokenize(status, body, words):
    assert status == 200, body
    assert json.loads(body)["count"] == words + 1  # "word" then " word" x (words - 1), then " "


def test_keep_alive_with_split_requests(base_url):
    # SDK clients reuse connections, and a request often reaches the server in more than one TCP segment.
    # Split inside the body and inside the head, many times over one connection.
    conn = RawConnection(base_url)
    try:
        failures = []
        for i in range(120):
            words = TEXT_WORDS + i
            data, head_len = tokenize_request(words)
            cut = head_len + 600 if i % 2 == 0 else 40
            conn.send(data, pause_at=cut)
            status, _, body = conn.read_response()
            if status != 200 or json.loads(body).get("count") != words + 1:
                failures.append((i, "body" if i % 2 == 0 else "head", status, body[:120]))
        assert not failures, f"{len(failures)} of 120 requests failed: {failures[:5]}"
    finally:
        conn.close()


def test_pipelined_partial_request_completed_later(base_url):
    # Deterministic form of the case above: request A plus the head and half the body of request B arrive
    # together; the rest of B comes only after A's response. B must be read intact.
    conn = RawConnection(base_url)
    try:
        a, _ = tokenize_request(5)
        b, head_len = tokenize_request(100)
        conn.send(a + b[:head_len + 50])
        status, _, body = conn.read_response()
        check_tokenize(status, body, 5)
        conn.send(b[head_len + 50:])
        status, _, body = conn.read_response()
        check_tokenize(status, body, 100)
    finally:
        conn.close()


def test_keep_alive_sequential_whole_requests(base_url):
    conn = RawConnection(base_url)
    try:
        for i in range(30):
            data, _ = tokenize_request(10 + i)
            conn.send(data)
            status, headers, body = conn.read_response()
            check_tokenize(status, body, 10 + i)
            assert headers.get("connection", "keep-alive").lower() != "close"
    finally:
        conn.close()


def test_pipelined_requests_answered_in_order(base_url):
    conn = RawConnection(base_url)
    try:
        reqs = [tokenize_request(w)[0] for w in (3, 50, 7)]
        conn.send(b"".join(reqs))
        for words in (3, 50, 7):
            status, _, body = conn.read_response()
            check_tokenize(status, body, words)
    finally:
        conn.close()


def test_connection_close_is_honoured(base_url):
    port = int(base_url.rsplit(":", 1)[1])
    data, _ = tokenize_request(5)
    data = data.replace(b"Host: test\r\n", b"Host: test\r\nConnection: close\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk  # the server must close after the response, ending this loop
    assert received.startswith(b"HTTP/1.1 200")
    assert json.loads(received.split(b"\r\n\r\n", 1)[1])["count"] == 6


def test_method_not_allowed_or_not_found(base_url):
    status, _, _ = request(base_url, "GET", "/v1/completions")
    assert status in (404, 405)
    status, _, _ = request(base_url, "POST", "/health")
    assert status in (404, 405)
