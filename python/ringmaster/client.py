"""The Ringmaster client: jobs, logs, metrics and usage over the REST API
(docs/api.md); files are in files.py.

A Client holds only its configuration (each call opens its own connection),
so one Client may be shared by threads.
"""

import json
import os
import secrets
import socket
import time
import urllib.parse

from . import config
from ._http import Transport
from .errors import Timeout
from .files import FilesMixin

ENDED_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
_MAX_WAIT_S = 60  # the most one GET ?wait= may ask for


class JobList(list):
    """A page of jobs (newest first), with `total` (how many match, when the
    server says) and `offset` (where this page starts)."""

    def __init__(self, jobs, total=None, offset=0):
        super().__init__(jobs)
        self.total = total
        self.offset = offset


class LogLine(str):
    """A log line as the CLI prints it, `[rank] text`, with `rank`, `attempt`
    (None outside follow mode) and `text` (the line alone)."""

    def __new__(cls, rank, text, attempt=None):
        s = super().__new__(cls, text if rank is None else f"[{rank}] {text}")
        s.rank, s.text, s.attempt = rank, text, attempt
        return s


class Client(FilesMixin):
    """A connection to a Ringmaster server.

    server, token, ca: found as the CLI finds them when not given (server may
    name a leader and its standbys: a list, or URLs comma-separated)
    ($RINGMASTER_SERVER, $RINGMASTER_TOKEN, $RINGMASTER_CA, the login that
    `ringmaster login` kept, a local `ringmaster up`'s data dir; see
    docs/python.md). `timeout` (seconds) bounds every socket operation of
    every call; `data` is the local server's data dir to look in.
    """

    def __init__(self, server=None, token=None, ca=None, timeout=30, data=None):
        server, token, ca = config.resolve(server, token, ca, data)
        self.server = server
        self.timeout = timeout
        self._http = Transport(server, token, ca, timeout)
        self._me = None

    def __repr__(self):
        return f"Client({self.server!r})"

    # ---- who and what
    def whoami(self):
        """The token's user: {"id", "name", "role", "scope", ...}."""
        return self._http.call("GET", "/api/v1/whoami")

    def version(self):
        """The server's build: {"version", "git_commit", ...}."""
        return self._http.call("GET", "/api/v1/version")

    def nodes(self):
        """The cluster's nodes (list of dicts, as GET /api/v1/nodes)."""
        return self._http.call("GET", "/api/v1/nodes")["nodes"]

    # ---- jobs
    def submit(self, spec):
        """Submits a job and returns its id (int).

        spec: a dict (sent as JSON); a path to a YAML or JSON file (its text
        is sent as is: the server parses YAML); or YAML/JSON text. Over the API
        a job without `working_dir` runs in its task's own sandbox.
        """
        if isinstance(spec, dict):
            body = json.dumps(spec)
        elif isinstance(spec, (str, os.PathLike)):
            text = os.fspath(spec)
            if "\n" not in text and os.path.isfile(text):
                with open(text, encoding="utf-8") as f:
                    body = f.read()
            elif "\n" not in text and text.endswith((".yaml", ".yml", ".json")):
                raise FileNotFoundError(f"{text}: no such file")
            else:
                body = text
        else:
            raise TypeError(f"spec: a dict, a file path or YAML text, not {type(spec).__name__}")
        # One key for this submit and its retries on other servers: one job.
        key = secrets.token_hex(16)
        return self._http.call("POST", "/api/v1/jobs", body=body.encode(), headers={"Idempotency-Key": key})["id"]

    def show(self, job_id):
        """The job with its `spec`, `tasks` and `events` (a dict)."""
        return self._http.call("GET", f"/api/v1/jobs/{int(job_id)}")

    def wait(self, job_id, timeout=None, poll=30):
        """Waits until the job ends and returns it (as show). Raises Timeout
        after `timeout` seconds (None: no limit). Each request waits on the
        server for at most `poll` seconds (at most 60)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            s = max(0, min(poll, _MAX_WAIT_S))
            if deadline is not None:
                s = max(0, min(s, deadline - time.monotonic()))
            job = self._http.call("GET", f"/api/v1/jobs/{int(job_id)}?wait={int(s)}", timeout=self.timeout + s)
            if job.get("state") in ENDED_STATES:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise Timeout(0, "DeadlineExceeded",
                              f"job {job_id} is still {job.get('state')} after {timeout:g}s")
            if s < 1:
                time.sleep(min(0.2, max(0, deadline - time.monotonic())) if deadline else 0.2)

    def jobs(self, state=None, kind=None, name=None, limit=100, offset=0, user=None, all=False):
        """Your jobs (admins: `user`'s, or everyone's with all=True), newest
        first, as a JobList (a list with `total` and `offset`). `state`: a
        state or a list of them; `kind`: one kind; `name`: a substring of the
        job's name."""
        q = {"limit": int(limit)}
        if offset:
            q["offset"] = int(offset)
        if state:
            q["state"] = state if isinstance(state, str) else ",".join(state)
        if kind:
            q["kind"] = kind
        if name:
            q["name"] = name
        if user:
            q["user"] = user
        if all:
            q["all"] = 1
        page = self._http.call("GET", "/api/v1/jobs?" + urllib.parse.urlencode(q))
        return JobList(page.get("jobs", []), page.get("total"), page.get("offset", offset))

    def cancel(self, job_id):
        """Asks the job to stop; returns at once ({"id", "cancelling": true})."""
        return self._http.call("POST", f"/api/v1/jobs/{int(job_id)}/cancel")

    def delete(self, job_id):
        """Removes an ended job and its logs (Conflict while it runs)."""
        return self._http.call("DELETE", f"/api/v1/jobs/{int(job_id)}")

    # ---- logs
    def logs(self, job_id, rank=None, follow=False):
        """The job's log lines, an iterator of LogLine (str `[rank] text`).

        follow=False: what is logged so far, by rank then attempt. follow=True:
        lines as they come until the job ends; the socket deadline holds
        because the server sends a keepalive every 5 s of silence.
        """
        q = {} if rank is None else {"rank": int(rank)}
        if follow:
            q["follow"] = 1
        path = f"/api/v1/jobs/{int(job_id)}/logs" + ("?" + urllib.parse.urlencode(q) if q else "")
        resp = self._http.open("GET", path)  # here, so that a NotFound is raised by the call itself
        return self._lines(resp, follow, job_id)

    def _lines(self, resp, follow, job_id):
        try:
            yield from (self._follow(resp) if follow else self._plain(resp))
        except (socket.timeout, TimeoutError):
            raise Timeout(0, "DeadlineExceeded", f"logs of job {job_id}: the stream stalled for {self.timeout:g}s") from None
        finally:
            resp.close()

    @staticmethod
    def _plain(resp):
        for raw in resp:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            rank, text = None, line
            if line.startswith("[") and "] " in line:
                head, _, rest = line.partition("] ")
                if head[1:].isdigit():
                    rank, text = int(head[1:]), rest
            yield LogLine(rank, text)

    @staticmethod
    def _follow(resp):
        pending = {}  # (rank, attempt) -> the start of a line cut in records
        for raw in resp:
            if not raw.strip():
                continue
            rec = json.loads(raw)
            if rec.get("end"):
                return
            if "line" not in rec:
                continue  # keepalive
            key = (rec.get("rank"), rec.get("attempt"))
            text = pending.pop(key, "") + rec["line"]
            if rec.get("partial"):
                pending[key] = text
                continue
            yield LogLine(key[0], text, key[1])
        for (rank, attempt), text in pending.items():
            yield LogLine(rank, text, attempt)

    # ---- metrics and usage
    def metrics(self, job_id, rank=0, limit=1000):
        """The rank's metrics records, oldest first: a list of dicts as the
        task wrote them (e.g. {"kind", "step", "loss", ...}), each with its
        `attempt`."""
        q = urllib.parse.urlencode({"rank": int(rank), "limit": int(limit)})
        return self._http.call("GET", f"/api/v1/jobs/{int(job_id)}/metrics?{q}").get("series", [])

    def usage(self, job_id, since=300, step=None):
        """The job's tasks' use over the last `since` seconds, one point per
        `step` seconds: a list of {"rank", "task", "node", "series" (e.g.
        "cpu_cores", "memory_bytes", "gpu_util"), "time_ms", "mean", "max"}."""
        q = {"since": int(since)}
        if step:
            q["step"] = int(step)
        answer = self._http.call("GET", f"/api/v1/jobs/{int(job_id)}/usage?" + urllib.parse.urlencode(q))
        points = []
        for task in answer.get("tasks", []):
            for series, values in sorted((task.get("series") or {}).items()):
                for v in values:
                    points.append({"rank": task.get("rank"), "task": task.get("task"), "node": task.get("node"),
                                   "series": series, "time_ms": v[0], "mean": v[1],
                                   "max": v[2] if len(v) > 2 else v[1]})
        return points
