"""Files of the files service (users/<you>/..., datasets/..., jobs/<id>/...):
put, get, ls, rm, as `ringmaster files` does them.

Uploads hash the file first and send its SHA-256 (the server stores it only
if every byte arrived), after a dry run that lets the server refuse it
(quota, permission) before any byte is sent. Downloads go to NAME.part, are
checked against the size and SHA-256 the server reports, then renamed.
"""

import hashlib
import json
import os
import socket
import sys
import time
import urllib.parse

from .errors import RingmasterError, Timeout

_BLOCK = 1 << 20
_NAMESPACES = ("users/", "datasets/", "images/", "jobs/")


def _human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


class TextProgress:
    """A progress bar on a stream (stderr): bytes, percent, rate. Callable as
    progress(sent, total)."""

    def __init__(self, label, stream=None):
        self.label = label
        self.stream = stream or sys.stderr
        self._start = time.monotonic()
        self._last = 0.0

    def __call__(self, done, total):
        now = time.monotonic()
        end = done >= total
        if not end and now - self._last < 0.1:
            return
        self._last = now
        frac = done / total if total else 1.0
        rate = done / max(now - self._start, 1e-6)
        bar = "#" * int(frac * 24) + "." * (24 - int(frac * 24))
        self.stream.write(f"\r{self.label} [{bar}] {frac * 100:3.0f}% {_human(done)} / {_human(total)}  "
                          f"{_human(rate)}/s{chr(10) if end else ''}")
        self.stream.flush()


def _progress_fn(progress, label):
    if progress is True:
        return TextProgress(label)
    return progress or None


def _sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            h.update(block)
    return h.hexdigest()


class FilesMixin:
    """The files calls of Client (which provides _http and whoami)."""

    def _remote(self, path):
        p = path.lstrip("/")
        if p.startswith(_NAMESPACES) or p + "/" in _NAMESPACES:
            return p
        if self._me is None:
            self._me = self.whoami()["name"]
        return f"users/{self._me}/{p}"

    @staticmethod
    def _url(remote):
        return "/api/v1/files/" + urllib.parse.quote(remote, safe="/")

    def put(self, local_path, remote_path, progress=None):
        """Uploads a file; returns {"path", "size", "sha256", "mtime"}.

        remote_path: users/<name>/..., datasets/..., jobs/<id>/...; any other
        path is under your own users/<you>/. progress: a callable
        progress(sent, total), or True for a text bar on stderr.
        """
        remote = self._remote(remote_path)
        size = os.path.getsize(local_path)
        sha = _sha256_file(local_path)
        url = self._url(remote)
        # Ask first: a refusal sent while we write a large body reaches us as a broken connection.
        self._http.call("PUT", url + "?dry_run=1", body=b"",
                        headers={"X-Ringmaster-Size": str(size), "X-Ringmaster-SHA256": sha})
        report = _progress_fn(progress, remote)

        def chunks(f):
            sent = 0
            if report:
                report(0, size)
            while sent < size:
                block = f.read(min(_BLOCK, size - sent))
                if not block:
                    raise RingmasterError(0, "Aborted", f"{local_path}: shrank while being sent")
                yield block
                sent += len(block)
                if report:
                    report(sent, size)

        with open(local_path, "rb") as f:
            resp = self._http.open("PUT", url, headers={"X-Ringmaster-SHA256": sha,
                                                        "Content-Type": "application/octet-stream"},
                                   chunks=chunks(f), length=size)
        with resp:
            return json.loads(resp.read() or b"{}")

    def get(self, remote_path, local_path, progress=None):
        """Downloads a file to local_path (through local_path + ".part"),
        checking its size and SHA-256 against what the server reports; returns
        the SHA-256. progress as for put."""
        remote = self._remote(remote_path)
        part = local_path + ".part"
        resp = self._http.open("GET", self._url(remote))
        try:
            size = int(resp.getheader("X-Ringmaster-Size") or -1)
            want = resp.getheader("X-Ringmaster-SHA256") or ""
            report = _progress_fn(progress, remote)
            h, got = hashlib.sha256(), 0
            with open(part, "wb") as out:
                if report:
                    report(0, max(size, 0))
                for block in iter(lambda: resp.read(_BLOCK), b""):
                    out.write(block)
                    h.update(block)
                    got += len(block)
                    if report:
                        report(got, max(size, got))
        except (socket.timeout, TimeoutError):
            _remove(part)
            raise Timeout(0, "DeadlineExceeded", f"get {remote}: the download stalled") from None
        except BaseException:
            _remove(part)
            raise
        finally:
            resp.close()
        if size >= 0 and got != size:
            _remove(part)
            raise RingmasterError(0, "DataLoss", f"{remote}: got {got} of {size} bytes")
        if want and h.hexdigest() != want:
            _remove(part)
            raise RingmasterError(0, "DataLoss", f"{remote}: the bytes received do not match the SHA-256 the server reported")
        os.replace(part, local_path)
        return h.hexdigest()

    def ls(self, prefix=""):
        """Every file under prefix (all pages): a list of {"path", "size", "mtime"}."""
        remote = self._remote(prefix)
        out, after = [], None
        while True:
            q = {"prefix": remote}
            if after:
                q["after"] = after
            page = self._http.call("GET", "/api/v1/files?" + urllib.parse.urlencode(q))
            out.extend(page.get("files", []))
            after = page.get("next_after")
            if not after:
                return out

    def rm(self, path):
        """Deletes a file ({"path", "deleted": true}; NotFound when there is none)."""
        return self._http.call("DELETE", self._url(self._remote(path)))


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass
