"""The container's entry command, user and environment, outside a container (SPEC 17.3).
deploy/Dockerfile's runtime stage (artefacts.py) is reproduced in a folder standing for the image
root: its COPYs, its user's folders, the Secrets the manifests mount (signing key, OAuth2 clients
and users, TLS certificate), a real password ``redis-server``. Only changes, each asserted found:
image paths under that folder, ports 0 on loopback, the test's Redis URL, this environment's fwrest
for ``/opt/fwrest``. ENTRYPOINT and CMD run with ENV (and the Deployment's env) in WORKDIR, as USER
when root (only DataPath and /tmp writable), else as the current user with the files read-only.
HEALTHCHECK passes, the OAuth2 port issues a token to the Secret's client, SIGHUP reloads, SIGTERM
exits 0, nothing written outside DataPath and /tmp."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from tests.conftest import ROOT, ReadyLines
from tests.deploy.artefacts import SERVICE_INI, container, runtime
from tests.redis_support import RedisServer

BIN = Path(sys.executable).parent
PASSWORD = "hopper"
CLIENT = ("deploy-app", "deploy-secret")


@pytest.fixture
def image_root() -> Iterator[Path]:
    """A folder every user may enter (the image's files are root's, readable by all)."""
    folder = Path(tempfile.mkdtemp(prefix="fwrest-image-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def rooted(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def readable_by_all(path: Path) -> bool:
    """Whether any user may reach ``path`` (every folder on the way searchable by others)."""
    for part in [*reversed(path.parents), path]:
        mode = part.stat().st_mode
        if not mode & 0o001 or (part == path and not mode & 0o004):
            return False
    return True


def snapshot(root: Path, skip: list[Path]) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        for name in [*dirnames, *filenames]:
            st = (here / name).lstat()
            out[str((here / name).relative_to(root))] = (st.st_mtime_ns, st.st_size)
    return out


def test_the_containers_command_serves_and_stops(image_root: Path) -> None:
    stage = runtime()
    uid, gid = stage.user()
    # as the image's user where another user may run this Python (/usr/bin/python3, not /root's)
    as_user = os.geteuid() == 0 and all(
        readable_by_all(p) for p in (Path(os.path.realpath(sys.executable)), BIN, ROOT / "src")
    )
    # -- the image's files --------------------------------------------------------------
    for source, dest in stage.copies():
        src, target = ROOT / source, rooted(image_root, dest)
        if src.is_dir():
            shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, target)
    data = "/var/lib/fwrest"
    assert data in stage.one("VOLUME")
    writable = [rooted(image_root, data), rooted(image_root, "/tmp")]
    # -- the pod's Secrets, where the Deployment mounts them -----------------------------
    text = SERVICE_INI.read_text()
    signing = re.search(r"(?m)^SigningKeyFile=(\S+)$", text)
    params = re.search(r'"onAuthparams": "file:(\S+)"', text)
    cert = re.search(r"(?m)^SslCertificate=(\S+)$", text)
    key = re.search(r"(?m)^SslCertificateKey=(\S+)$", text)
    assert signing and params and cert and key
    for path in (signing[1], params[1], cert[1], key[1]):
        rooted(image_root, path).parent.mkdir(parents=True, exist_ok=True)
    rooted(image_root, signing[1]).write_text(secrets.token_urlsafe(32) + "\n")
    oauth = {"client_id": CLIENT[0], "client_secret": CLIENT[1],
             "users": [{"username": "grace", "password": PASSWORD}],
             "types": [{"grant_type": "password"}, {"grant_type": "refresh_token"}]}  # fmt: skip
    rooted(image_root, params[1]).write_text(json.dumps(oauth))
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    rooted(image_root, cert[1]).write_bytes(b"".join(p.bytes() for p in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(rooted(image_root, key[1])))
    ca_file = image_root.parent / f"{image_root.name}-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    # -- the Redis the configuration names, with the password of the Secret fwrest-redis --
    redis_password = secrets.token_urlsafe(16)
    redis = RedisServer(Path(tempfile.mkdtemp(prefix="fwrest-redis-")), password=redis_password)
    # -- the configuration: image paths under the folder, ports 0 on loopback, the Redis -
    cmd = [*stage.exec_form("ENTRYPOINT"), *stage.exec_form("CMD")]
    config_path = cmd[cmd.index("serve") + 1]
    config_file = rooted(image_root, config_path)
    config = config_file.read_text()
    assert config == text, "the image's configuration is deploy/service.ini"
    replacements = {
        "redis://redis:6379/0": f"redis://127.0.0.1:{redis.port}/0",
        "=/run/secrets/": f"={image_root}/run/secrets/",
        "file:/run/secrets/": f"file:{image_root}/run/secrets/",
        f"DataPath={data}": f"DataPath={rooted(image_root, data)}",
        "HostName=0.0.0.0": "HostName=127.0.0.1",
    }
    for old, new in replacements.items():
        assert old in config, old
        config = config.replace(old, new)
    documented = {m[1] for m in re.finditer(r"(?m)^Port=(\d+)$", config)}
    config = re.sub(r"(?m)^Port=\d+$", "Port=0", config)
    assert config.count("/run/secrets/") == config.count(f"{image_root}/run/secrets/") == 4
    config_file.write_text(config)
    cmd[cmd.index("serve") + 1] = str(config_file)
    # -- the environment: the image's ENV, the Deployment's env ---------------------------
    env = stage.env()
    assert env["PATH"].startswith("/opt/fwrest/bin:")
    env["PATH"] = env["PATH"].replace("/opt/fwrest/bin", str(BIN), 1)
    env["PYTHONPATH"] = ":".join(str(rooted(image_root, p)) for p in env["PYTHONPATH"].split(":"))
    deployment_env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container()["env"]}
    assert deployment_env == {"FWREST_REDIS_PASSWORD": {"name": "fwrest-redis", "key": "password"}}
    env["FWREST_REDIS_PASSWORD"] = redis_password
    env["HOME"] = "/nonexistent"  # the user's home: useradd --home-dir /nonexistent
    env["TMPDIR"] = str(writable[1])  # the pod's /tmp (an emptyDir)
    cwd = rooted(image_root, stage.one("WORKDIR"))
    # -- who may write where ----------------------------------------------------------------
    for folder in writable:
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
    if as_user:
        for folder in writable:
            os.chown(folder, uid, gid)
        for secret in (signing[1], params[1], cert[1], key[1]):  # defaultMode 0440, fsGroup
            os.chown(rooted(image_root, secret), 0, gid)
            rooted(image_root, secret).chmod(0o440)
        user: dict[str, object] = {"user": uid, "group": gid, "extra_groups": []}
    else:
        user = {}
    for dirpath, dirnames, filenames in os.walk(image_root):
        here = Path(dirpath)
        if here in writable:
            dirnames[:] = []
            continue
        if not as_user:
            for name in filenames:
                (here / name).chmod(0o444)
            here.chmod(0o555)
    print("as", f"uid {uid}" if as_user else f"the current user (uid {os.geteuid()})")
    before = snapshot(image_root, writable)
    _, health = stage.healthcheck()
    redis.start()
    stderr = (image_root.parent / f"{image_root.name}.log").open("w+b")
    try:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr, **user
        )  # type: ignore[arg-type]
    except BaseException:
        stderr.close()
        redis.stop()
        shutil.rmtree(redis.folder, ignore_errors=True)
        raise
    out = ReadyLines(proc)
    lines, ready = out.lines, out.ready

    def log() -> str:
        stderr.flush()
        return Path(stderr.name).read_text(errors="replace")

    def healthy(port: int) -> int:
        probe = [part.replace(f"127.0.0.1:{monitor_port}", f"127.0.0.1:{port}") for part in health]
        assert probe != health
        return subprocess.run(
            probe, cwd=cwd, env=env, capture_output=True, timeout=10, **user
        ).returncode  # type: ignore[arg-type]

    monitor_port = re.search(r"127\.0\.0\.1:(\d+)/", " ".join(health))[1]  # type: ignore[index]
    assert monitor_port in documented
    try:
        assert ready.wait(60), "".join(lines) + log()
        serving = (re.match(r"fwrest: serving (\S+) \[(\S+)\]", line) for line in lines)
        urls = {m[2]: m[1] for m in serving if m}
        monitor = int(re.search(r":(\d+)", urls["APP_MONITOR"])[1])  # type: ignore[index]
        deadline = time.monotonic() + 30  # the HEALTHCHECK's --start-period
        while (code := healthy(monitor)) != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert code == 0, log()
        base = urls["HTTPS_REST"].rstrip("/")
        with httpx.Client(verify=ssl.create_default_context(cafile=ca_file)) as client:
            grant = {"grant_type": "password", "username": "grace", "password": PASSWORD}
            token = client.post(f"{base}/fw/oauth2/token", auth=CLIENT, data=grant)
            assert token.status_code == 200, token.text
            bearer = {"Authorization": f"Bearer {token.json()['access_token']}"}
            who = client.get(f"{base}/whoami", headers=bearer)
            assert who.status_code == 200 and who.json()["user"] == "grace", who.text
        assert httpx.get(f"{urls['HTTP_REST'].rstrip('/')}/hello").status_code == 200
        # SIGHUP (docker kill -s HUP, systemctl reload): a reload in place
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        done = '"outcome":"done","generation":2'
        while done not in log() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert done in log(), log()
        # healthy again as HEALTHCHECK's --retries sees it (a check once failed just after a reload)
        deadline = time.monotonic() + 30
        while (code := healthy(monitor)) != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert code == 0, log()
        proc.send_signal(signal.Signals[stage.one("STOPSIGNAL")])
        code = proc.wait(40)
    finally:
        out.close()
        redis.stop()
        shutil.rmtree(redis.folder, ignore_errors=True)
        ca_file.unlink(missing_ok=True)
        output = log()
        stderr.close()
        Path(stderr.name).unlink()
    assert code == 0, output
    assert healthy(monitor) != 0, "the health check fails once the service is gone"
    assert snapshot(image_root, writable) == before, "written outside DataPath and /tmp"
    assert redis_password not in output and CLIENT[1] not in output
    assert "WARNING" not in output, output
