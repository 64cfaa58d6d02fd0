"""Where a Client finds its server, token and CA when not given them.

The same places, in the same order, as the `ringmaster` CLI, so that one
`ringmaster login` (or a local `ringmaster up`) serves both:
  server: $RINGMASTER_SERVER, else <data>/server.json's "url", else the one
          server of the credentials file;
  token:  $RINGMASTER_TOKEN, else the login kept for that server, else
          <data>/admin.token;
  CA:     $RINGMASTER_CA, else the login's, else server.json's "ca", else
          <data>/tls/ca.crt.
<data> is $RINGMASTER_DATA, else /var/lib/ringmaster for root, ~/.ringmaster
for others. Pure functions of the environment and files: thread-safe.
"""

import json
import os
import pwd
import stat

from .errors import RingmasterError

_MAX_CREDENTIALS_BYTES = 1 << 20


def _config_error(message):
    return RingmasterError(0, "FailedPrecondition", message)


def normalize_server_url(url):
    """A server URL as the credentials file keys it: no trailing '/', scheme
    and host in lower case. A leader and its standbys (a list, or URLs
    comma-separated) become "URL,URL" of such, in order."""
    if isinstance(url, (list, tuple)) or "," in url:
        parts = url if isinstance(url, (list, tuple)) else url.split(",")
        return ",".join(normalize_server_url(p.strip()) for p in parts if p and p.strip())
    u = url.strip().rstrip("/")
    scheme_end = u.find("://")
    host_end = len(u) if scheme_end < 0 else u.find("/", scheme_end + 3)
    if host_end < 0:
        host_end = len(u)
    return u[:host_end].lower() + u[host_end:]


def default_data_dir():
    """The data dir of a local `ringmaster up`, as the CLI picks it."""
    d = os.environ.get("RINGMASTER_DATA")
    if d:
        return d
    if os.geteuid() == 0:
        return "/var/lib/ringmaster"
    return os.path.join(os.environ.get("HOME") or "/tmp", ".ringmaster")


def credentials_path():
    """~/.config/ringmaster/credentials.json, or under $XDG_CONFIG_HOME."""
    home = os.environ.get("XDG_CONFIG_HOME", "")
    if not home.startswith("/"):
        home = os.environ.get("HOME") or pwd.getpwuid(os.geteuid()).pw_dir or "/tmp"
        home = os.path.join(home, ".config")
    return os.path.join(home, "ringmaster", "credentials.json")


def load_logins(path=None):
    """The credentials file's logins by normalized server URL: {url: {"token",
    "user", "token_id", "ca"}}. A file others may read, or another user's, is
    refused as the CLI refuses it."""
    path = path or credentials_path()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise _config_error(f"credentials file {path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise _config_error(f"credentials file {path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise _config_error(f"credentials file {path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})")
        if st.st_mode & 0o077:
            raise _config_error(f"credentials file {path} is open to other users (mode {st.st_mode & 0o7777:04o}): "
                                f"chmod 600 {path}")
        text = f.read(_MAX_CREDENTIALS_BYTES + 1)
    try:
        servers = json.loads(text)["servers"]
        if not isinstance(servers, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise _config_error(f'credentials file {path}: expected {{"servers": {{URL: {{...}}}}}}') from None
    out = {}
    for url, entry in servers.items():
        if isinstance(entry, dict) and isinstance(entry.get("token"), str):
            out[normalize_server_url(url)] = entry
    return out


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def _server_info(data):
    text = _read(os.path.join(data, "server.json"))
    try:
        info = json.loads(text) if text else None
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def resolve(server=None, token=None, ca=None, data=None):
    """(server URL, token, CA file or None), found as the CLI finds them.
    Raises RingmasterError when there is no server or no token."""
    data = data or default_data_dir()
    info = _server_info(data)
    logins = None
    if not server:
        server = os.environ.get("RINGMASTER_SERVER") or info.get("url")
    if not server:
        logins = load_logins()
        if len(logins) == 1:
            server = next(iter(logins))
        elif logins:
            raise _config_error("no server given and you are logged in to several: pass server= (one of "
                                + ", ".join(sorted(logins)) + ")")
        else:
            raise _config_error("no server given: pass server=URL, set RINGMASTER_SERVER, log in with "
                                f"`ringmaster login USER --server URL`, or start one with `ringmaster up --data {data}`")
    server = normalize_server_url(server)
    token = token or os.environ.get("RINGMASTER_TOKEN")
    login = None
    try:
        login = (logins if logins is not None else load_logins()).get(server)
    except RingmasterError:
        if not token:
            raise  # a token given outright needs no readable credentials file
    if not token and login:
        token = login["token"]
    if not token:
        token = (_read(os.path.join(data, "admin.token")) or "").strip()
    if not token:
        raise _config_error(f"no token for {server}: pass token=, set RINGMASTER_TOKEN, "
                            "or log in (`ringmaster login USER`)")
    if not ca:
        ca = (os.environ.get("RINGMASTER_CA") or (login or {}).get("ca")
              or (info.get("ca") if isinstance(info.get("ca"), str) else None))
    if not ca and os.path.exists(os.path.join(data, "tls", "ca.crt")):
        ca = os.path.join(data, "tls", "ca.crt")
    return server, token, ca or None
