"""A real `ringmaster up` for Python tests, the way tests/e2e/lib.sh starts one.

A temp data dir on an ephemeral loopback port, sandboxes under it, and the
tasks' working dir a world-readable temp dir (tasks run as unprivileged uids).
`stop` ends the server by its pid, then any task left by the pids the shims
recorded; `remove` deletes both dirs (kept with KEEP_E2E_DATA set).
"""
import glob
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time

RM = os.environ.get("RINGMASTER_BIN", "ringmaster")


class LiveUp:
    def __init__(self, prefix, env=None, ready_timeout=60.0):
        self.data = tempfile.mkdtemp(prefix=prefix + ".")
        self.tools = tempfile.mkdtemp(prefix=prefix + "-tools.")
        os.chmod(self.tools, 0o755)
        self.env = dict(os.environ if env is None else env, XDG_CONFIG_HOME=os.path.join(self.data, "config"))
        self.log = open(os.path.join(self.data, "up.log"), "ab")
        self.proc = subprocess.Popen(
            [RM, "up", "--data", self.data, "--port", "0", "--sandbox-root", os.path.join(self.data, "sandboxes")],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.tools, env=self.env)
        info = os.path.join(self.data, "server.json")
        deadline = time.monotonic() + ready_timeout
        while not (os.path.exists(info) and " ready " in self.rmc("nodes", check=False)):
            if self.proc.poll() is not None:
                raise RuntimeError("ringmaster up exited:\n" + self.tail())
            if time.monotonic() > deadline:
                raise RuntimeError(f"ringmaster up had no ready node in {ready_timeout:.0f}s:\n" + self.tail())
            time.sleep(0.1)
        with open(info) as f:
            meta = json.load(f)
        self.url = meta["url"].rstrip("/")
        self.ssl = ssl.create_default_context(cafile=meta["ca"]) if meta.get("ca") else None

    def tail(self, n=40):
        with open(os.path.join(self.data, "up.log"), errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def rmc(self, *args, stdin=None, check=True, token=None):
        """The CLI against this server: as its admin, or with `token`."""
        env = dict(self.env)
        env.pop("RINGMASTER_TOKEN", None)
        if token:
            env["RINGMASTER_TOKEN"] = token
        r = subprocess.run([RM, "--data", self.data, *args], input=stdin, capture_output=True, text=True,
                           cwd=self.tools, env=env, timeout=300)
        if check and r.returncode != 0:
            raise AssertionError(f"ringmaster {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # Whatever task is left (the agent normally stops them): by the pids the shims recorded.
        for pattern, group in (("tasks/*/task.pid", True), ("tasks/*/shim.pid", False)):
            for f in glob.glob(os.path.join(self.data, "agent", pattern)):
                try:
                    pid = int(open(f).read().strip())
                    os.killpg(pid, signal.SIGKILL) if group else os.kill(pid, signal.SIGKILL)
                except (ValueError, OSError):
                    pass
        self.log.close()

    def remove(self):
        if os.environ.get("KEEP_E2E_DATA"):
            print("kept", self.data, file=sys.stderr)
            return
        shutil.rmtree(self.data, ignore_errors=True)
        shutil.rmtree(self.tools, ignore_errors=True)
