"""One `ringmaster up` and one headless Chromium for the whole dashboard suite.

The server runs in a temp data dir on an ephemeral loopback port, the way
tests/e2e/lib.sh starts it: sandboxes under the data dir, tasks' working dir a
world-readable temp dir, stopped by pid, its tasks killed by the pids the shims
recorded. Users are made with the CLI; the tests drive the dashboard and use
the REST API (as alice, with a token) only to set up jobs.
"""
import glob
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

RM = os.environ["RINGMASTER_BIN"]
REPO = os.environ["REPO_ROOT"]
BUILD = os.environ.get("BUILD_DIR", os.path.join(REPO, "build"))
PASSWORDS = {"alice": "alice-password-1", "bob": "bob-password-22"}


def wait_for(what, fn, timeout=60.0, interval=0.1):
    """Polls fn until it returns a true value (a hang guard, not a timing check)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - the last error is reported below
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


class Server:
    def __init__(self):
        self.data = tempfile.mkdtemp(prefix="rm-browser.")
        self.tools = tempfile.mkdtemp(prefix="rm-browser-tools.")
        os.chmod(self.tools, 0o755)
        self.env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(self.data, "config"))
        self.log = open(os.path.join(self.data, "up.log"), "ab")
        self.proc = subprocess.Popen(
            [RM, "up", "--data", self.data, "--port", "0", "--sandbox-root", os.path.join(self.data, "sandboxes")],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.tools, env=self.env)
        info = os.path.join(self.data, "server.json")

        def ready():
            if self.proc.poll() is not None:
                raise SystemExit("ringmaster up exited:\n" + self.tail())
            return os.path.exists(info) and " ready " in self.rmc("nodes", check=False)

        wait_for("ringmaster up to have a ready node", ready, timeout=60)
        with open(info) as f:
            meta = json.load(f)
        self.url = meta["url"].rstrip("/")
        self.api_url = self.url  # the REST API the tests set up jobs through
        self.ssl = ssl.create_default_context(cafile=meta["ca"]) if meta.get("ca") else None
        self.tokens = {}

    def tail(self, n=40):
        with open(os.path.join(self.data, "up.log"), errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def rmc(self, *args, stdin=None, check=True):
        r = subprocess.run([RM, "--data", self.data, *args], input=stdin, capture_output=True, text=True,
                           cwd=self.tools, env=self.env, timeout=300)
        if check and r.returncode != 0:
            raise AssertionError(f"ringmaster {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def add_user(self, name):
        self.rmc("users", "create", name, "--password-stdin", stdin=PASSWORDS[name] + "\n")
        self.tokens[name] = self.rmc("tokens", "create", "--user", name).strip()

    def api(self, user, method, path, body=None, content_type="application/json"):
        data = body if isinstance(body, (bytes, type(None))) else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
        req = urllib.request.Request(self.api_url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.tokens[user])
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ssl, timeout=60) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def submit(self, user, yaml_text):
        status, body = self.api(user, "POST", "/api/v1/jobs", yaml_text, "application/yaml")
        if status != 201:
            raise AssertionError(f"submit: {status} {body}")
        return body["id"]

    def job(self, user, job_id):
        return self.api(user, "GET", f"/api/v1/jobs/{job_id}")[1]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pattern, group in (("tasks/*/task.pid", True), ("tasks/*/shim.pid", False)):
            for f in glob.glob(os.path.join(self.data, "agent", pattern)):
                try:
                    pid = int(open(f).read().strip())
                    os.killpg(pid, signal.SIGKILL) if group else os.kill(pid, signal.SIGKILL)
                except (ValueError, OSError):
                    pass
        self.log.close()

    def remove(self):
        shutil.rmtree(self.data, ignore_errors=True)
        shutil.rmtree(self.tools, ignore_errors=True)


def start_chromium(profile, downloads):
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
                "--window-size=1280,800", "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        opts.add_argument(arg)
    opts.add_experimental_option("prefs", {"download.default_directory": downloads, "download.prompt_for_download": False})
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    driver.set_script_timeout(120)
    return driver
