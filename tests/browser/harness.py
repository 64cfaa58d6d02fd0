"""One `ringmaster up` and one headless Chromium for the whole dashboard suite.

The server runs in a temp data dir on an ephemeral loopback port, the way
tests/e2e/lib.sh starts it: sandboxes under the data dir, tasks' working dir a
world-readable temp dir, stopped by pid, its tasks killed by the pids the shims
recorded. Users are made with the CLI; the tests drive the dashboard and use
the REST API (as alice, with a token) only to set up jobs.
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from live_up import LiveUp  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402

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


class Server(LiveUp):
    """The suite's server, with its users (passwords and tokens) and the REST calls that set up jobs."""

    def __init__(self):
        super().__init__("rm-browser")
        self.api_url = self.url  # the REST API the tests set up jobs through
        self.tokens = {}

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
