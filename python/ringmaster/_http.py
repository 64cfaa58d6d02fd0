"""One HTTP(S) call to the server at a time, with a deadline on every socket
operation, the bearer token, and the server's errors turned into typed ones.

A Transport holds no connection between calls (each call opens its own), so
one Transport may serve several threads.
"""

import http.client
import json
import socket
import ssl
import urllib.parse

from .errors import RingmasterError, Timeout, Unavailable, error_for

_USER_AGENT = "ringmaster-python"


class Transport:
    def __init__(self, server, token, ca=None, timeout=30.0):
        u = urllib.parse.urlsplit(server)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise RingmasterError(0, "InvalidArgument", f"server: {server!r} is not an http:// or https:// URL")
        self.server = server
        self.timeout = timeout
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port
        self._base = u.path.rstrip("/")
        self._token = token
        self._ssl = None
        if self._https:
            self._ssl = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()

    def _connection(self, timeout):
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def open(self, method, path, body=None, headers=None, timeout=None, chunks=None, length=None):
        """Sends a request and returns the open response of a 2xx answer (the
        caller reads it, then closes it); any other answer raises its typed
        error. `body`: bytes; or `chunks`, an iterable of bytes of `length` in
        all, streamed. `timeout` bounds each socket operation (connect, each
        write, each read)."""
        timeout = self.timeout if timeout is None else timeout
        conn = self._connection(timeout)
        h = {"Authorization": f"Bearer {self._token}", "User-Agent": _USER_AGENT, "Accept-Encoding": "identity",
             "Connection": "close"}
        h.update(headers or {})
        try:
            conn.putrequest(method, self._base + path, skip_accept_encoding=True)
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
            raise Timeout(0, "DeadlineExceeded", f"{method} {path}: no answer from {self.server} in {timeout:g}s") from None
        except ssl.SSLError as e:
            conn.close()
            raise Unavailable(0, "Unavailable", f"TLS with {self.server}: {e}") from None
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise Unavailable(0, "Unavailable", f"{method} {path}: {self.server}: {e}") from None
        if 200 <= resp.status < 300:
            return resp  # Connection: close: the socket goes with the response
        try:
            text = resp.read(1 << 20)
        finally:
            conn.close()
        raise _error_from(resp.status, text)

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
