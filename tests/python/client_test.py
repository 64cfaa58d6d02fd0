#!/usr/bin/python3
"""The Python client (python/ringmaster) against a live `ringmaster up` this
test starts on an ephemeral loopback port: submit (dict and YAML), wait,
logs (plain and follow), show, cancel, delete, files put/get/ls/rm with
progress, metrics, usage, and the typed errors carrying the server's message.

Needs RINGMASTER_BIN (the binary) and the client on PYTHONPATH (CTest sets both).
"""

import hashlib
import json
import os
import sys
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ringmaster  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_up import LiveUp  # noqa: E402

# Prints three lines and writes a metrics record after each, as ringmaster-train does.
LINES_JOB = {
    "name": "py-lines",
    "command": 'for i in 1 2 3; do echo "line $i"; '
               'echo "{\\"kind\\": \\"step\\", \\"step\\": $i, \\"loss\\": 0.$((10 - i))}" >> "$RINGMASTER_METRICS_FILE"; '
               'sleep 0.3; done',
    "resources": {"cpu": 0.25, "memory": "64Mi"},
}
LONG_JOB_YAML = """name: py-long
command: sleep 300
resources:
  cpu: 0.25
  memory: 64Mi
"""


def rmc(*args, token=None):
    return Live.up.rmc(*args, token=token).strip()


class Live:
    """The server and agent of this test, and its two users' clients."""
    up = data = tools = url = None


def setUpModule():
    for k in ("RINGMASTER_SERVER", "RINGMASTER_TOKEN", "RINGMASTER_CA", "RINGMASTER_DATA"):
        os.environ.pop(k, None)
    Live.up = LiveUp("rm-pyclient", ready_timeout=20)
    Live.data, Live.tools = Live.up.data, Live.up.tools
    # Tasks run as unprivileged uids: they need a world-readable working dir.
    os.chdir(Live.tools)
    os.environ["XDG_CONFIG_HOME"] = Live.up.env["XDG_CONFIG_HOME"]  # never the user's own logins
    Live.admin = ringmaster.Client(data=Live.data, timeout=5)
    Live.url = Live.admin.server
    rmc("users", "create", "alice")
    rmc("users", "create", "bob")
    Live.alice_token = rmc("tokens", "create", "--user", "alice")
    Live.alice = ringmaster.Client(server=Live.url, token=Live.alice_token, timeout=10)
    Live.bob_token = rmc("tokens", "create", "--user", "bob")
    Live.bob = ringmaster.Client(server=Live.url, token=Live.bob_token, timeout=10)


def tearDownModule():
    if Live.up:
        Live.up.stop()
        os.chdir("/")
        Live.up.remove()


class JobsTest(unittest.TestCase):
    def test_submit_follow_wait_show_logs_metrics_usage(self):
        c = Live.alice
        job = c.submit(LINES_JOB)
        self.assertIsInstance(job, int)
        followed = list(c.logs(job, follow=True))  # returns when the job has ended
        self.assertEqual(followed, ["[0] line 1", "[0] line 2", "[0] line 3"])
        self.assertEqual([(l.rank, l.attempt, l.text) for l in followed[:1]], [(0, 1, "line 1")])
        done = c.wait(job, timeout=30)
        self.assertEqual(done["state"], "SUCCEEDED", done)
        self.assertEqual(done["id"], job)
        shown = c.show(job)
        self.assertEqual(shown["spec"]["name"], "py-lines")
        self.assertEqual([t["rank"] for t in shown["tasks"]], [0])
        self.assertEqual(list(c.logs(job)), followed)
        self.assertEqual(list(c.logs(job, rank=0)), followed)
        series = c.metrics(job)
        self.assertEqual([m["step"] for m in series], [1, 2, 3])
        self.assertIsInstance(series[0]["step"], int)
        self.assertIsInstance(series[0]["loss"], float)
        self.assertAlmostEqual(series[-1]["loss"], 0.7)
        self.assertEqual(c.metrics(job, limit=1), series[-1:])
        usage = c.usage(job, since=120)
        self.assertIsInstance(usage, list)
        for p in usage:
            self.assertEqual(p["rank"], 0)
            self.assertIsInstance(p["time_ms"], int)
        listed = c.jobs(limit=1000)
        self.assertIn(job, [j["id"] for j in listed])
        if listed.total is not None:  # a server with filters
            ok = c.jobs(state=["SUCCEEDED"], name="py-lines")
            self.assertIn(job, [j["id"] for j in ok])
            self.assertTrue(all(j["state"] == "SUCCEEDED" for j in ok), ok)

    def test_yaml_text_and_file_cancel_timeout_delete(self):
        c = Live.alice
        path = os.path.join(Live.tools, "long.yaml")
        with open(path, "w") as f:
            f.write(LONG_JOB_YAML)
        from_file = c.submit(path)
        from_text = c.submit(LONG_JOB_YAML)
        self.assertEqual(c.show(from_file)["spec"]["command"], c.show(from_text)["spec"]["command"])
        with self.assertRaises(ringmaster.Timeout):
            c.wait(from_file, timeout=1)
        with self.assertRaises(ringmaster.Conflict):
            c.delete(from_file)  # still running
        for job in (from_file, from_text):
            self.assertTrue(c.cancel(job)["cancelling"])
        for job in (from_file, from_text):
            self.assertEqual(c.wait(job, timeout=30)["state"], "CANCELLED")
            c.delete(job)
            with self.assertRaises(ringmaster.NotFound):
                c.show(job)
        with self.assertRaises(FileNotFoundError):
            c.submit(os.path.join(Live.tools, "missing.yaml"))

    def test_bad_spec_is_invalid_argument_naming_the_field(self):
        with self.assertRaises(ringmaster.InvalidArgument) as e:
            Live.alice.submit({"command": "true", "resources": {"cpu": -1}})
        self.assertIn("cpu", e.exception.message)
        self.assertEqual(e.exception.status, 400)


class ErrorsTest(unittest.TestCase):
    def test_another_users_job_is_not_found_with_the_servers_message(self):
        job = Live.alice.submit(LINES_JOB)
        with self.assertRaises(ringmaster.NotFound) as e:
            Live.bob.show(job)
        raw = urllib.request.Request(f"{Live.url}/api/v1/jobs/{job}", headers={"Authorization": "Bearer " + Live.bob_token})
        with self.assertRaises(urllib.error.HTTPError) as http_error:
            urllib.request.urlopen(raw, timeout=10)
        self.assertEqual(e.exception.message, json.load(http_error.exception)["error"]["message"])
        self.assertEqual((e.exception.status, e.exception.code), (404, "NotFound"))
        self.assertIn(str(job), str(e.exception))
        for call in (lambda: Live.bob.logs(job), lambda: Live.bob.cancel(job), lambda: Live.bob.metrics(job)):
            with self.assertRaises(ringmaster.NotFound):
                call()
        Live.alice.wait(job, timeout=30)

    def test_bad_token_is_unauthenticated(self):
        with self.assertRaises(ringmaster.Unauthenticated) as e:
            ringmaster.Client(server=Live.url, token="rm_" + "0" * 64).jobs()
        self.assertEqual(e.exception.status, 401)
        self.assertTrue(e.exception.message)

    def test_unreachable_server_is_unavailable(self):
        with self.assertRaises(ringmaster.Unavailable):
            ringmaster.Client(server="http://127.0.0.1:1", token="rm_x", timeout=5).whoami()


class FilesTest(unittest.TestCase):
    def test_put_get_ls_rm_with_progress(self):
        c = Live.alice
        local = os.path.join(Live.tools, "blob.bin")
        payload = os.urandom(3 << 20) + b"tail"
        with open(local, "wb") as f:
            f.write(payload)
        sent = []
        info = c.put(local, "py/blob.bin", progress=lambda done, total: sent.append((done, total)))
        self.assertEqual(info["path"], "users/alice/py/blob.bin")
        self.assertEqual(info["sha256"], hashlib.sha256(payload).hexdigest())
        self.assertEqual(sent[-1], (len(payload), len(payload)))
        self.assertGreater(len(sent), 2)
        self.assertEqual(sent, sorted(sent))
        got = []
        back = os.path.join(Live.tools, "back.bin")
        self.assertEqual(c.get("users/alice/py/blob.bin", back, progress=lambda d, t: got.append((d, t))),
                         info["sha256"])
        with open(back, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), info["sha256"])
        self.assertEqual(got[-1], (len(payload), len(payload)))
        self.assertFalse(os.path.exists(back + ".part"))
        c.put(local, "py/second.bin")
        self.assertEqual([f["path"] for f in c.ls("py/")], ["users/alice/py/blob.bin", "users/alice/py/second.bin"])
        self.assertEqual(c.ls("py/")[0]["size"], len(payload))
        with self.assertRaises(ringmaster.NotFound):
            Live.bob.get("users/alice/py/blob.bin", os.path.join(Live.tools, "stolen"))
        with self.assertRaises(ringmaster.PermissionDenied):
            Live.bob.put(local, "users/alice/py/planted.bin")
        self.assertTrue(c.rm("py/blob.bin")["deleted"])
        self.assertEqual([f["path"] for f in c.ls("py/")], ["users/alice/py/second.bin"])
        with self.assertRaises(ringmaster.NotFound):
            c.rm("py/blob.bin")


class ConfigTest(unittest.TestCase):
    def test_finds_server_and_token_as_the_cli_does(self):
        # A local `ringmaster up`: its data dir has server.json and admin.token.
        self.assertEqual(ringmaster.Client(data=Live.data).whoami()["name"], "admin")
        # A `ringmaster login`: the credentials file under $XDG_CONFIG_HOME, readable by its owner alone.
        cfg = os.path.join(os.environ["XDG_CONFIG_HOME"], "ringmaster")
        os.makedirs(cfg, mode=0o700, exist_ok=True)
        path = os.path.join(cfg, "credentials.json")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump({"servers": {Live.url + "/": {"user": "alice", "token": Live.alice_token, "token_id": 1}}}, f)
        try:
            empty = os.path.join(Live.tools, "no-data")
            self.assertEqual(ringmaster.Client(data=empty).whoami()["name"], "alice")
            os.environ["RINGMASTER_TOKEN"] = "rm_" + "1" * 64
            with self.assertRaises(ringmaster.Unauthenticated):
                ringmaster.Client(data=empty).whoami()
            del os.environ["RINGMASTER_TOKEN"]
            os.chmod(path, 0o644)
            with self.assertRaisesRegex(ringmaster.RingmasterError, "open to other users"):
                ringmaster.Client(data=empty)
        finally:
            os.environ.pop("RINGMASTER_TOKEN", None)
            os.remove(path)


if __name__ == "__main__":
    unittest.main(verbosity=2)
