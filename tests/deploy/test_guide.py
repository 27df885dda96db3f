"""docs/deploy.md's container and Kubernetes commands against deploy/ (no docker or cluster here:
names, paths and flags checked against the artefacts)."""

from __future__ import annotations

import re
import shlex

from tests.conftest import ROOT
from tests.deploy.artefacts import DOCKERFILE, SERVICE_INI, container, kind, runtime
from tests.docs.blocks import Block, example


def commands(block: Block) -> list[list[str]]:
    return [shlex.split(line) for line in block.text.splitlines() if line.strip()]


def test_docker_commands_build_and_run_the_image_as_it_is_made() -> None:
    build, run = commands(example("deploy-docker-build"))
    assert build[:2] == ["docker", "build"]
    assert ROOT / build[build.index("-f") + 1] == DOCKERFILE and build[-1] == "."
    assert run[:2] == ["docker", "run"] and "--read-only" in run
    # the writable places of a read-only container: /tmp and the DataPath volume
    assert run[run.index("--tmpfs") + 1] == "/tmp"
    volume = run[run.index("-v") + 1].split(":")[1]
    assert volume in runtime().one("VOLUME")
    assert f"DataPath={volume}" in SERVICE_INI.read_text()
    published = {p.split(":")[1] for i, p in enumerate(run) if run[i - 1] == "-p"}
    assert published == set(runtime().one("EXPOSE").split())
    assert run[-1] == build[build.index("-t") + 1]


def test_secrets_commands_make_what_the_pods_read() -> None:
    made: dict[str, set[str]] = {}
    for cmd in commands(example("deploy-k8s-secrets")):
        assert cmd[:3] == ["kubectl", "create", "secret"]
        kind_, name = cmd[3], cmd[4]
        if kind_ == "tls":
            made[name] = {"tls.crt", "tls.key"}
        else:
            keys = set()
            for arg in cmd[5:]:
                m = re.fullmatch(r"--from-(literal|file)=([\w.-]+)(=.*)?", arg)
                assert m, arg
                keys.add(m[2])
            made[name] = keys
    pod = kind("Deployment")[0]["spec"]["template"]["spec"]
    box = container()
    mounts = {m["name"]: m["mountPath"] for m in box["volumeMounts"]}
    used: dict[str, set[str]] = {}
    config = SERVICE_INI.read_text()
    for volume in pod["volumes"]:
        if "secret" in volume:
            where = mounts[volume["name"]]
            files = set(re.findall(re.escape(where) + r"/([\w.-]+)", config))
            assert files, f"{where}: service.ini reads no file of it"
            used[volume["secret"]["secretName"]] = files
    for env in box["env"]:
        ref = env["valueFrom"]["secretKeyRef"]
        used.setdefault(ref["name"], set()).add(ref["key"])
    assert made == used


def test_apply_rollout_and_drain_commands_name_the_deployment() -> None:
    (deployment,) = kind("Deployment")
    name = deployment["metadata"]["name"]
    apply, status = commands(example("deploy-k8s-apply"))
    assert apply == ["kubectl", "apply", "-k", "deploy/"]
    assert (ROOT / apply[3] / "kustomization.yaml").is_file()
    assert status[:4] == ["kubectl", "rollout", "status", f"deployment/{name}"]
    set_image, status = commands(example("deploy-k8s-rollout"))
    assert set_image[:4] == ["kubectl", "set", "image", f"deployment/{name}"]
    box, image = set_image[4].split("=")
    assert box == container()["name"]
    assert image.rsplit(":", 1)[0] == container()["image"].rsplit(":", 1)[0]
    assert status[:4] == ["kubectl", "rollout", "status", f"deployment/{name}"]
    (drain,) = commands(example("deploy-k8s-drain"))
    assert drain[:2] == ["kubectl", "drain"]
    # kubectl drain refuses pods with emptyDir volumes without this flag
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert any("emptyDir" in v for v in volumes) and "--delete-emptydir-data" in drain
