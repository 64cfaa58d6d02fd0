#!/usr/bin/python3
"""The Python client's parts that need no server: error typing, where it
finds its server and token, log stream parsing, the progress bar."""

import io
import json
import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ringmaster  # noqa: E402
from ringmaster import config, errors  # noqa: E402
from ringmaster.client import Client  # noqa: E402


class ErrorsTest(unittest.TestCase):
    def test_typed_by_code_then_status(self):
        cases = [(404, "NotFound", ringmaster.NotFound), (401, "unauthenticated", ringmaster.Unauthenticated),
                 (403, "permission_denied", ringmaster.PermissionDenied), (409, "FailedPrecondition", ringmaster.Conflict),
                 (409, "AlreadyExists", ringmaster.Conflict), (429, "ResourceExhausted", ringmaster.TooManyRequests),
                 (400, "", ringmaster.InvalidArgument), (503, "Unavailable", ringmaster.Unavailable),
                 (413, "ResourceExhausted", ringmaster.RingmasterError), (500, "Internal", ringmaster.RingmasterError)]
        for status, code, cls in cases:
            e = errors.error_for(status, code, "the server's words")
            self.assertIs(type(e), cls, (status, code))
            self.assertEqual((e.status, e.code, e.message, str(e)), (status, code, "the server's words", "the server's words"))
            self.assertIsInstance(e, ringmaster.RingmasterError)
        self.assertIsInstance(errors.error_for(0, "DeadlineExceeded", "x"), TimeoutError)


class ConfigTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.saved = dict(os.environ)
        for k in ("RINGMASTER_SERVER", "RINGMASTER_TOKEN", "RINGMASTER_CA", "RINGMASTER_DATA"):
            os.environ.pop(k, None)
        os.environ["XDG_CONFIG_HOME"] = os.path.join(self.dir.name, "config")
        self.data = os.path.join(self.dir.name, "data")
        os.makedirs(os.path.join(self.data, "tls"))

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.saved)
        self.dir.cleanup()

    def write(self, path, text, mode=0o600):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as f:
            f.write(text)
        os.chmod(path, mode)

    def test_normalize(self):
        self.assertEqual(config.normalize_server_url("HTTPS://Host.Example:8443/Base/"), "https://host.example:8443/Base")

    def test_local_up_data_dir(self):
        self.write(os.path.join(self.data, "server.json"), json.dumps({"url": "https://127.0.0.1:4000", "ca": "/ca.pem"}))
        self.write(os.path.join(self.data, "admin.token"), "rm_admin\n")
        self.assertEqual(config.resolve(data=self.data), ("https://127.0.0.1:4000", "rm_admin", "/ca.pem"))
        os.environ["RINGMASTER_SERVER"] = "http://other:1/"
        os.environ["RINGMASTER_TOKEN"] = "rm_env"
        self.assertEqual(config.resolve(data=self.data), ("http://other:1", "rm_env", "/ca.pem"))
        self.assertEqual(config.resolve("http://given", "rm_given", "/given.pem", data=self.data),
                         ("http://given", "rm_given", "/given.pem"))

    def test_login_then_tls_dir(self):
        creds = config.credentials_path()
        self.assertEqual(creds, os.path.join(self.dir.name, "config", "ringmaster", "credentials.json"))
        self.write(creds, json.dumps({"servers": {"https://a:1": {"user": "u", "token": "rm_login", "ca": "/login.pem"}}}))
        self.assertEqual(config.resolve(data=self.data), ("https://a:1", "rm_login", "/login.pem"))
        self.write(creds, json.dumps({"servers": {"https://a:1": {"token": "rm_login"}}}))
        self.write(os.path.join(self.data, "tls", "ca.crt"), "pem")
        self.assertEqual(config.resolve(data=self.data)[2], os.path.join(self.data, "tls", "ca.crt"))
        self.write(creds, json.dumps({"servers": {"https://a:1": {"token": "x"}, "https://b:1": {"token": "y"}}}))
        with self.assertRaisesRegex(ringmaster.RingmasterError, "logged in to several"):
            config.resolve(data=self.data)
        self.write(creds, "{}", mode=0o644)
        with self.assertRaisesRegex(ringmaster.RingmasterError, "open to other users"):
            config.resolve(data=self.data)

    def test_nothing_found_says_what_to_do(self):
        with self.assertRaisesRegex(ringmaster.RingmasterError, "no server given: pass server=URL, set RINGMASTER_SERVER"):
            config.resolve(data=self.data)
        with self.assertRaisesRegex(ringmaster.RingmasterError, "no token for http://s"):
            config.resolve("http://s", data=self.data)


class StreamsTest(unittest.TestCase):
    def test_follow_joins_partial_records_and_stops_at_the_end(self):
        records = [{"rank": 0, "attempt": 1, "line": "a"}, {"keepalive": True},
                   {"rank": 1, "attempt": 2, "line": "lo", "partial": True}, {"rank": 0, "attempt": 1, "line": "b"},
                   {"rank": 1, "attempt": 2, "line": "ng"}, {"end": True, "state": "SUCCEEDED"},
                   {"rank": 0, "attempt": 1, "line": "after the end"}]
        lines = list(Client._follow(io.BytesIO(b"".join(json.dumps(r).encode() + b"\n" for r in records))))
        self.assertEqual(lines, ["[0] a", "[0] b", "[1] long"])
        self.assertEqual([(l.rank, l.attempt, l.text) for l in lines][2], (1, 2, "long"))

    def test_plain_lines_keep_their_rank(self):
        lines = list(Client._plain(io.BytesIO(b"[0] x\n[12] [y] z\nno rank\n")))
        self.assertEqual(lines, ["[0] x", "[12] [y] z", "no rank"])
        self.assertEqual([(l.rank, l.text) for l in lines], [(0, "x"), (12, "[y] z"), (None, "no rank")])

    def test_progress_bar_ends_with_a_newline(self):
        out = io.StringIO()
        bar = ringmaster.TextProgress("f", stream=out)
        bar(0, 2048)
        bar(2048, 2048)
        self.assertTrue(out.getvalue().endswith("\n"))
        self.assertIn("100% 2.0 KiB / 2.0 KiB", out.getvalue())

    def test_submit_names_a_missing_file_before_any_call(self):
        c = Client(server="http://127.0.0.1:1", token="rm_x")
        with self.assertRaises(FileNotFoundError):
            c.submit("no/such/spec.yaml")
        with self.assertRaises(TypeError):
            c.submit(42)


class FailoverTest(unittest.TestCase):
    """A Transport with several servers on loopback: past a dead one and a
    503, through a standby's 307, with one Idempotency-Key per submit."""

    def setUp(self):
        import http.server
        import threading

        seen = self.seen = []

        def server(answer):
            class H(http.server.BaseHTTPRequestHandler):
                def log_message(self, *a):
                    pass

                def do_POST(self):
                    body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                    status, headers, out = answer(self, body)
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)

                do_GET = do_POST

            s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
            threading.Thread(target=s.serve_forever, daemon=True).start()
            self.addCleanup(s.server_close)
            self.addCleanup(s.shutdown)
            return f"http://127.0.0.1:{s.server_address[1]}"

        err = b'{"error":{"code":"unavailable","message":"standby"},"leader":""}'

        def leader(h, body):
            seen.append((h.path, h.headers.get("Idempotency-Key"), body))
            return 201, {}, b'{"id": 7}'

        self.leader = server(leader)
        self.unavailable = server(lambda h, body: (503, {"Retry-After": "1"}, err))
        self.standby = server(lambda h, body: (307, {"Location": self.leader + h.path}, err))
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        s.close()

    def test_dead_and_503_servers_are_passed_and_a_redirect_followed(self):
        from ringmaster.client import Client
        c = Client(server=[self.dead, self.unavailable, self.standby], token="t")
        self.assertEqual(c.submit("command: x\n"), 7)
        self.assertEqual(c.submit("command: x\n"), 7)
        self.assertEqual(len(self.seen), 2)
        (path, key1, body), (_, key2, _) = self.seen
        self.assertEqual((path, body), ("/api/v1/jobs", b"command: x\n"))
        self.assertRegex(key1, "^[0-9a-f]{32}$")
        self.assertNotEqual(key1, key2)  # one key per submit

    def test_no_server_answering_fails_within_the_budget(self):
        from ringmaster._http import Transport
        from ringmaster.errors import Unavailable
        t = Transport(f"{self.dead},{self.unavailable}", "t", failover=1.0)
        start = time.monotonic()
        with self.assertRaises(Unavailable):
            t.call("GET", "/api/v1/jobs")
        self.assertLess(time.monotonic() - start, 5)


if __name__ == "__main__":
    unittest.main(verbosity=2)
