"""deploy/ (SPEC 17.3): linters pass (hadolint defaults; kubernetes-validate strict for 1.30, whose
preStop ``sleep`` is on by default, and the newest known; ``systemd-analyze`` verify and security,
installed by .ci/run), and the artefacts agree with each other and fwrest (ports, paths, probes,
user, stop deadline)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest

from fwrest.config.schema import KEYS
from tests.conftest import ROOT
from tests.deploy.artefacts import (
    DOCKERFILE,
    UNIT,
    container,
    kind,
    kustomized,
    runtime,
    service_config,
    stages,
)

BIN = Path(sys.executable).parent
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())


def run(*command: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60)


def test_hadolint_passes_the_container_file() -> None:
    done = run(str(BIN / "hadolint"), "--no-color", str(DOCKERFILE))
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_hadolint_is_not_silent() -> None:
    """The same run finds a fault put in a copy (an unpinned base image, a shell-form CMD)."""
    text = DOCKERFILE.read_text()
    exec_cmd = re.search(r"(?m)^CMD (\[.*\])$", text)
    base = re.search(r"(?m)^FROM (\S+) AS build$", text)
    assert exec_cmd and base
    shell_cmd = "CMD " + " ".join(json.loads(exec_cmd[1]))
    bad = text.replace(base[1], "python:latest").replace(exec_cmd[0], shell_cmd)
    done = run(str(BIN / "hadolint"), "--no-color", "-", stdin=bad)
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "DL3007" in done.stdout and "DL3025" in done.stdout, out


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_kubernetes_objects_validate_against_the_schemas(version: str) -> None:
    objects = kustomized()
    kinds = sorted(obj["kind"] for obj in objects)
    assert kinds == ["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                     "Service", "Service", "Service"]  # fmt: skip
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_kubernetes_validation_is_strict() -> None:
    """A misspelt field is refused, so a field the cluster would drop cannot pass."""
    import copy

    (deployment,) = kind("Deployment")
    bad = copy.deepcopy(deployment)
    probe = bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["periodSecond"] = probe.pop("periodSeconds")
    with pytest.raises(kubernetes_validate.ValidationError, match="periodSecond"):
        kubernetes_validate.validate(bad, K8S_VERSIONS[-1], strict=True)


def test_the_pods_run_what_the_image_runs() -> None:
    """The Deployment keeps ENTRYPOINT and CMD, runs as USER, mounts the ConfigMap where CMD reads
    it, with the securityContext the image is built for."""
    pod_spec = kind("Deployment")[0]["spec"]["template"]["spec"]
    box = container()
    assert "command" not in box and "args" not in box
    uid, gid = runtime().user()
    security = pod_spec["securityContext"]
    runs_as = (security["runAsUser"], security["runAsGroup"], security["runAsNonRoot"])
    assert runs_as == (uid, gid, True)
    assert box["securityContext"]["readOnlyRootFilesystem"] is True
    assert box["securityContext"]["allowPrivilegeEscalation"] is False
    assert box["securityContext"]["capabilities"]["drop"] == ["ALL"]
    cmd = runtime().exec_form("CMD")
    config = Path(cmd[cmd.index("serve") + 1])
    (configmap,) = kind("ConfigMap")
    mounts = {m["name"]: m["mountPath"] for m in box["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    config_volume = next(n for n, v in volumes.items() if "configMap" in v)
    assert volumes[config_volume]["configMap"]["name"] == configmap["metadata"]["name"]
    assert mounts[config_volume] == str(config.parent)
    assert config.name in configmap["data"]
    # the image's default configuration is the ConfigMap's content
    copies = [(ROOT / src, dest) for src, dest in runtime().copies()]
    assert (ROOT / "deploy" / "service.ini", str(config)) in copies


def test_every_path_of_the_configuration_is_mounted_as_it_is_used() -> None:
    """Each absolute path of deploy/service.ini is on a volume: DataPath writable, secrets on a
    Secret's, /tmp writable (TLS chains, shared memory files)."""
    config = service_config()
    pod_spec = kind("Deployment")[0]["spec"]["template"]["spec"]
    box = container()
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in box["volumeMounts"]}
    readonly = {m["mountPath"] for m in box["volumeMounts"] if m.get("readOnly")}

    def volume_of(path: str) -> tuple[str, dict[str, object]]:
        found = [m for m in mounts if path == m or path.startswith(m + "/")]
        assert found, f"{path} is on no volume of the pod (the root filesystem is read-only)"
        return found[0], mounts[found[0]]

    data = config["HTTPSERVER"]["DataPath"]
    where, volume = volume_of(data)
    assert "emptyDir" in volume and where not in readonly
    # the image makes DataPath for its user, as a volume
    made = [r for r in runtime().all("RUN") if f"-o {runtime().user()[0]} " in r]
    assert made and data in made[0] and data in runtime().one("VOLUME")
    where, volume = volume_of("/tmp")
    assert "emptyDir" in volume and where not in readonly
    secrets = re.findall(r"/run/secrets/[\w./-]+", Path(ROOT / "deploy/service.ini").read_text())
    assert len(secrets) == 4, secrets
    for path in secrets:
        where, volume = volume_of(path)
        assert "secret" in volume and where in readonly, path
    # env:NAME secrets come from the Deployment's environment, from a Secret
    names = re.findall(r"=env:(\w+)", Path(ROOT / "deploy/service.ini").read_text())
    env = {e["name"]: e for e in box["env"]}
    assert names and all("secretKeyRef" in env[name]["valueFrom"] for name in names)


def test_ports_probes_and_services_agree_with_the_configuration() -> None:
    config = service_config()
    servers = [s.strip() for s in config["HTTPSERVER"]["Servers"].split(",")]
    monitor = config["APP_MONITOR"]
    ports = {int(config[s]["Port"]) for s in servers} | {int(monitor["Port"])}
    box = container()
    named = {p["name"]: p["containerPort"] for p in box["ports"]}
    assert set(named.values()) == ports
    assert set(runtime().one("EXPOSE").split()) == {str(p) for p in ports}
    # every port bound where the kubelet and the Services reach it
    assert {config[s]["HostName"] for s in servers} | {monitor["HostName"]} == {"0.0.0.0"}
    api = monitor["ApiPath"]
    for probe, which in (("startupProbe", "started"), ("livenessProbe", "live"),
                         ("readinessProbe", "ready")):  # fmt: skip
        get = box[probe]["httpGet"]
        assert get["path"] == f"{api}/health/{which}", probe
        assert named[get["port"]] == int(monitor["Port"]), probe
    # the container file's health check asks the readiness probe of the same port
    _, health = runtime().healthcheck()
    assert f"127.0.0.1:{monitor['Port']}{api}/health/ready" in " ".join(health)
    # a Service per port, each to ready pods of the Deployment
    selector = kind("Deployment")[0]["spec"]["selector"]["matchLabels"]
    served = set()
    for service in kind("Service"):
        assert service["spec"]["selector"] == selector
        for port in service["spec"]["ports"]:
            served.add(named[port["targetPort"]])
    assert served == ports
    assert kind("PodDisruptionBudget")[0]["spec"]["selector"]["matchLabels"] == selector
    target = kind("HorizontalPodAutoscaler")[0]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "fwrest")
    assert "replicas" not in kind("Deployment")[0]["spec"], "the autoscaler sets replicas"
    assert box["resources"]["requests"]["cpu"], "the autoscaler needs a CPU request"


def test_a_pod_stops_within_its_grace_period() -> None:
    """terminationGracePeriodSeconds counts from preStop: its sleep and the drain (GracefulTimeout)
    must fit, or the drain is SIGKILLed; the stop signal is the one fwrest drains on."""
    graceful = next(k for k in KEYS if k.name == "GracefulTimeout")
    configured = service_config()["HTTPSERVER"].get("GracefulTimeout")
    assert configured is None and isinstance(graceful.default, int)
    pod_spec = kind("Deployment")[0]["spec"]["template"]["spec"]
    sleep = container()["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert sleep >= 1
    assert pod_spec["terminationGracePeriodSeconds"] > sleep + graceful.default / 1000
    assert runtime().one("STOPSIGNAL") == "SIGTERM"
    strategy = kind("Deployment")[0]["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0, "a rolling update keeps every pod until replaced"


def test_the_wheel_is_built_in_a_stage_of_its_own() -> None:
    build, run = stages()
    assert "pip wheel" in build.one("RUN") and "FWREST_COMPILE=1" in build.one("RUN")
    assert "-slim" in run.image
    assert ["--from=build", "/opt/fwrest", "/opt/fwrest"] in [c.split() for c in run.all("COPY")]
    # the same Python in both stages: the virtual environment's interpreter link holds
    assert build.image.split(":")[0] == run.image.split(":")[0]
    assert build.image.split("}")[0] == run.image.split("}")[0]


def _analyze() -> str:
    found = shutil.which("systemd-analyze")
    # a machine without it fails here, never skips (.ci/run installs Debian's systemd)
    assert found is not None, "systemd-analyze is required: apt install systemd (.ci/run does)"
    return found


def _unit_here(tmp_path: Path) -> Path:
    """The unit with its ExecStart's program this environment's fwrest."""
    text = UNIT.read_text()
    program = re.search(r"(?m)^ExecStart=(\S+)", text)
    assert program and program[1].endswith("/bin/fwrest"), "ExecStart runs fwrest"
    unit = tmp_path / UNIT.name
    unit.write_text(text.replace(program[1], str(BIN / "fwrest")))
    return unit


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = _analyze()
    done = run(analyze, "verify", str(_unit_here(tmp_path)))
    # verify exits 0 on an unknown key, only saying so: any line is a fault
    out = done.stdout + done.stderr
    assert done.returncode == 0 and not out.strip(), out
    # and it does say so
    unit = tmp_path / "typo.service"
    unit.write_text(_unit_here(tmp_path).read_text().replace("ProtectClock=", "ProtectClok="))
    assert "ProtectClok" in run(analyze, "verify", str(unit)).stderr


def test_systemd_unit_is_hardened(tmp_path: Path) -> None:
    analyze = _analyze()
    done = run(analyze, "security", "--offline=yes", "--no-pager", str(_unit_here(tmp_path)))
    assert done.returncode == 0, done.stdout + done.stderr
    score = re.search(r"Overall exposure level for \S+: ([\d.]+)", done.stdout)
    assert score, done.stdout
    print(f"systemd-analyze security: exposure {score[1]}")
    assert float(score[1]) <= 2.0


def test_systemd_unit_reloads_and_stops_as_fwrest_expects() -> None:
    """ExecReload: SIGHUP; SIGTERM to the supervisor alone (KillMode=mixed) in TimeoutStopSec."""
    service = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            service[key] = value
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert service["KillSignal"] == "SIGTERM" and service["KillMode"] == "mixed"
    graceful = next(k for k in KEYS if k.name == "GracefulTimeout")
    assert isinstance(graceful.default, int)
    assert int(service["TimeoutStopSec"]) * 1000 > graceful.default
    assert service["ProtectSystem"] == "strict" and service["StateDirectory"] == "fwrest"


def test_the_build_context_lets_in_what_the_container_file_copies() -> None:
    """The dockerignore keeps the context small (no .venv, tests), letting in what stages copy."""
    ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
    rules = [line.strip() for line in ignore if line.strip() and not line.startswith("#")]
    assert rules[0] == "*"
    let_in = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    sources = {source.rstrip("/") for stage in stages() for source, _ in stage.copies()}
    sources.discard("")
    assert sources and sources <= let_in, sources - let_in
    for source in sources:
        assert (ROOT / source).exists(), source
