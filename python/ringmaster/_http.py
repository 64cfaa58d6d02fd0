"""One HTTP(S) call to the server at a time, with a deadline on every socket
operation, the bearer token, and the server's errors turned into typed ones.

A Transport holds no connection between calls (each call opens its own), so
one Transport may serve several threads. Given several servers (a leader and
its standbys: a list, or one comma-separated string), a call follows a
standby's 307 to the leader, and moves on to the next server when one cannot
be reached or answers 503, for up to `failover` seconds.
"""

import http.client
import json
import socket
import ssl
import time
import urllib.parse

from .errors import RingmasterError, Timeout, Unavailable, error_for

_USER_AGENT = "ringmaster-python"


class _Server:
    def __init__(self, url, ca):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise RingmasterError(0, "InvalidArgument", f"server: {url!r} is not an http:// or https:// URL")
        self.url = url
        self.origin = f"{u.scheme}://{u.netloc}"
        self.https = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port
        self.base = u.path.rstrip("/")
        self.ssl = None
        if self.https:
            self.ssl = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()

    def connection(self, timeout):
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.ssl)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


class _Redirect(Exception):
    def __init__(self, location, error):
        super().__init__(location)
        self.location = location
        self.error = error


def split_servers(server):
    """"https://a:1, https://b:1/" or a list -> ["https://a:1", "https://b:1"]."""
    parts = server if isinstance(server, (list, tuple)) else str(server).split(",")
    return [p.strip().rstrip("/") for p in parts if p and p.strip()]


class Transport:
    def __init__(self, server, token, ca=None, timeout=30.0, failover=30.0):
        urls = split_servers(server)
        if not urls:
            raise RingmasterError(0, "InvalidArgument", "server: no URL given")
        self._servers = [_Server(u, ca) for u in urls]
        self._ca = ca
        self.server = ",".join(urls)
        self.timeout = timeout
        self.failover = failover
        self._current = 0  # the server that answered last
        self._token = token

    def open(self, method, path, body=None, headers=None, timeout=None, chunks=None, length=None):
        """Sends a request and returns the open response of a 2xx answer (the
        caller reads it, then closes it); any other answer raises its typed
        error. `body`: bytes; or `chunks`, an iterable of bytes of `length` in
        all, streamed (sent to one server only: it cannot be sent twice).
        `timeout` bounds each socket operation (connect, each write, each read)."""
        n = len(self._servers)
        deadline = time.monotonic() + self.failover
        # Sent again after a server may have run it (no answer in time, a 503
        # after its handler ran) only when that is safe; a request no server
        # received (refused, a standby's redirect or 503 with Retry-After) always.
        replayable = method in ("GET", "HEAD", "PUT") or "Idempotency-Key" in (headers or {})
        i = self._current
        tries = 0
        while True:
            tries += 1
            server = self._servers[i % n]
            try:
                try:
                    resp = self._try(server, method, path, body, headers, timeout, chunks, length)
                except _Redirect as r:
                    u = urllib.parse.urlsplit(r.location)
                    if server.url.startswith("https://") and u.scheme != "https":
                        raise r.error from None  # never the token in clear
                    leader = next((s for s in self._servers if s.origin == f"{u.scheme}://{u.netloc}"), None)
                    if leader is None:
                        leader = _Server(f"{u.scheme}://{u.netloc}", self._ca)
                    if chunks is not None:
                        raise r.error from None
                    resp = self._try(leader, method, path, body, headers, timeout, None, None)
                    if leader in self._servers:
                        self._current = self._servers.index(leader)
                    return resp
                self._current = i % n
                return resp
            except (Unavailable, _Redirect) as e:
                err = e.error if isinstance(e, _Redirect) else e
                unsent = isinstance(e, _Redirect) or getattr(e, "unsent", False)
                if n < 2 or chunks is not None or time.monotonic() >= deadline or not (replayable or unsent):
                    raise err from None
            except Timeout:
                if n < 2 or chunks is not None or time.monotonic() >= deadline or not replayable:
                    raise
            i += 1
            if tries % n == 0:
                time.sleep(max(0.0, min(0.5, deadline - time.monotonic())))

    def _try(self, server, method, path, body, headers, timeout, chunks, length):
        timeout = self.timeout if timeout is None else timeout
        conn = server.connection(timeout)
        h = {"Authorization": f"Bearer {self._token}", "User-Agent": _USER_AGENT, "Accept-Encoding": "identity",
             "Connection": "close"}
        h.update(headers or {})
        try:
            conn.putrequest(method, server.base + path, skip_accept_encoding=True)
            if chunks is not None:
                h["Content-Length"] = str(length)
            elif body is not None or method in ("POST", "PUT"):
                h["Content-Length"] = str(len(body or b""))
            for k, v in h.items():
                conn.putheader(k, v)
            conn.endheaders()
            if chunks is not None:
                for c in chunks:
                    conn.send(c)
            elif body:
                conn.send(body)
            resp = conn.getresponse()
        except (socket.timeout, TimeoutError):
            conn.close()
            raise Timeout(0, "DeadlineExceeded", f"{method} {path}: no answer from {server.url} in {timeout:g}s") from None
        except ConnectionRefusedError as e:
            conn.close()
            err = Unavailable(0, "Unavailable", f"{method} {path}: {server.url}: {e}")
            err.unsent = True
            raise err from None
        except ssl.SSLError as e:
            conn.close()
            raise Unavailable(0, "Unavailable", f"TLS with {server.url}: {e}") from None
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise Unavailable(0, "Unavailable", f"{method} {path}: {server.url}: {e}") from None
        if 200 <= resp.status < 300:
            return resp  # Connection: close: the socket goes with the response
        try:
            text = resp.read(1 << 20)
        finally:
            conn.close()
        err = _error_from(resp.status, text)
        if resp.status == 307 and resp.getheader("Location"):
            raise _Redirect(resp.getheader("Location"), err)
        if resp.status == 503 and not isinstance(err, Unavailable):
            err = Unavailable(503, "Unavailable", str(err))
        if resp.status == 503:
            err.unsent = bool(resp.getheader("Retry-After"))  # a standby's or a starting server's: nothing ran
        raise err

    def call(self, method, path, body=None, headers=None, timeout=None):
        """A request whose 2xx answer is JSON (or empty): the parsed answer."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
        elif isinstance(body, str):
            body = body.encode()
        resp = self.open(method, path, body=body, headers=headers, timeout=timeout)
        try:
            text = resp.read()
        except (socket.timeout, TimeoutError):
            raise Timeout(0, "DeadlineExceeded", f"{method} {path}: the answer stalled") from None
        finally:
            resp.close()
        if not text.strip():
            return {}
        try:
            return json.loads(text)
        except ValueError:
            raise RingmasterError(resp.status, "Internal", f"{method} {path}: the answer is not JSON") from None


def _error_from(status, text):
    try:
        err = json.loads(text)["error"]
        return error_for(status, err.get("code", ""), err.get("message", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        msg = text.decode("utf-8", "replace").strip() or http.client.responses.get(status, "error")
        return error_for(status, "", msg)
