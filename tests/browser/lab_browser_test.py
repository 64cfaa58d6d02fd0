#!/usr/bin/python3
"""A notebook through the server's proxy in headless Chromium (selenium).

Given a server, alice's token and her running notebook job: signs in (a
session cookie from POST /api/v1/session, sent from a page of the server's
origin), opens /jobs/ID/lab/, makes a new Python 3 notebook, runs
`import torch; print(torch.arange(3) * 2)` and reads `tensor([0, 2, 4])`
from the cell's output. Before signing in the notebook is 401; signed in as
another user (--other-token) it is 404. Screenshots on failure go to --out.
Exit 0: passed; 1: failed; 77: skipped (the server has no sessions).
"""
import argparse
import json
import os
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

SKIP = 77


def wait_for(driver, script, timeout, what):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = driver.execute_script(script)
            if last:
                return last
        except Exception as e:  # the page may be between loads
            last = e
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")


def fetch(driver, method, path, body=None, headers=None):
    """Runs fetch() in the page: (status, text)."""
    return driver.execute_async_script(
        """const [method, path, body, headers, done] = arguments;
        fetch(path, {method, headers, credentials: 'same-origin', body: body === null ? undefined : body})
          .then(async r => done([r.status, await r.text()]), e => done([0, String(e)]));""",
        method, path, body, headers or {})


def sign_in(driver, token):
    """A session for `token`'s user: the cookie replaces any session before it."""
    return fetch(driver, "POST", "/api/v1/session", json.dumps({"token": token}), {"Content-Type": "application/json"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--other-token", required=True, help="another user's token: the notebook is 404 to them")
    ap.add_argument("--job", required=True, type=int)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    driver.set_script_timeout(60)
    lab = f"/jobs/{args.job}/lab"
    try:
        driver.get(args.server + "/healthz")  # a page of the origin, for fetch()
        status, text = fetch(driver, "GET", lab + "/tree")
        assert status == 401, f"the notebook without a session: {status} {text[:300]}"
        status, text = sign_in(driver, args.other_token)
        if status == 404:
            print("SKIP: this server has no browser sessions (POST /api/v1/session is 404)")
            return SKIP
        assert status == 201, f"POST /api/v1/session: {status} {text[:300]}"
        status, text = fetch(driver, "GET", lab + "/tree")
        assert status == 404, f"the notebook in another user's session: {status} {text[:300]}"
        print("ok: the notebook is 401 without a session and 404 in another user's")
        status, text = sign_in(driver, args.token)
        assert status == 201, f"POST /api/v1/session: {status} {text[:300]}"

        # A new notebook, through Jupyter's own contents API (its _xsrf cookie as the header).
        driver.get(args.server + lab + "/tree")
        wait_for(driver, "return document.cookie.includes('_xsrf=')", 30, "Jupyter's _xsrf cookie")
        xsrf = driver.execute_script(
            "return document.cookie.split('; ').find(c => c.startsWith('_xsrf=')).slice(6)")
        status, text = fetch(driver, "POST", lab + "/api/contents", json.dumps({"type": "notebook"}),
                             {"Content-Type": "application/json", "X-XSRFToken": xsrf})
        assert status == 201, f"new notebook: {status} {text[:300]}"
        name = json.loads(text)["path"]

        driver.get(f"{args.server}{lab}/notebooks/{name}")
        wait_for(driver, "return window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel && "
                 "Jupyter.notebook.kernel.is_connected()", 90, "the notebook's kernel")
        driver.execute_script("""const c = Jupyter.notebook.get_cell(0);
            c.set_text('import torch; print(torch.arange(3) * 2)');
            c.execute();""")
        out = wait_for(driver, """const o = document.querySelector('.output_subarea');
            return o && o.innerText.includes('tensor(') ? o.innerText : null;""", 120, "the cell's output")
        assert "tensor([0, 2, 4])" in out, f"the cell printed {out!r}"
        print(f"ok: the cell printed {out.strip()!r}")
        return 0
    except Exception:
        shot = os.path.join(args.out, "lab_failure.png")
        driver.save_screenshot(shot)
        print(f"FAIL (screenshot: {shot}); page: {driver.current_url}", file=sys.stderr)
        raise
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
