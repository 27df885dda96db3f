"""deploy/'s artefacts as tests read them: the container file's runtime stage, its configuration
(the ConfigMap's), the objects ``kubectl apply -k deploy/`` creates. The container file is read as
Docker reads it (continuations joined, comments dropped, exec forms decoded); an unknown instruction
fails the tests, so nothing in it goes unchecked."""

from __future__ import annotations

import configparser
import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
SERVICE_INI = DEPLOY / "service.ini"
KUSTOMIZATION = DEPLOY / "kustomization.yaml"
UNIT = DEPLOY / "fwrest.service"

# the environment the base image (python:*-slim) sets, under the container file's own ENV
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
_KNOWN = {"ARG", "FROM", "WORKDIR", "COPY", "RUN", "ENV", "USER", "EXPOSE", "VOLUME",
          "STOPSIGNAL", "HEALTHCHECK", "ENTRYPOINT", "CMD"}  # fmt: skip


@dataclass
class Stage:
    """One ``FROM`` of the container file and what follows it."""

    image: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def one(self, keyword: str) -> str:
        (args,) = self.all(keyword)
        return args

    def exec_form(self, keyword: str) -> list[str]:
        """A JSON exec form: a shell form makes /bin/sh PID 1, which does not pass SIGTERM on."""
        value = json.loads(self.one(keyword))
        assert isinstance(value, list) and all(isinstance(v, str) for v in value), keyword
        return value

    def env(self) -> dict[str, str]:
        """A process's environment: the base image's, then each ENV (``$NAME`` as Docker expands
        it)."""
        out = dict(BASE_ENV)
        for args in self.all("ENV"):
            for pair in shlex.split(args):
                name, _, value = pair.partition("=")
                assert name and _, f"ENV {args!r}: write NAME=value"
                out[name] = re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: out[m[1] or m[2]], value)
        return out

    def copies(self) -> list[tuple[str, str]]:
        """(context source, image destination) of each COPY not from another stage."""
        out = []
        for args in self.all("COPY"):
            words = shlex.split(args)
            if any(w.startswith("--from") for w in words):
                continue
            *sources, dest = words
            out += [(source, dest) for source in sources]
        return out

    def user(self) -> tuple[int, int]:
        uid, _, gid = self.one("USER").partition(":")
        return int(uid), int(gid or uid)

    def healthcheck(self) -> tuple[dict[str, str], list[str]]:
        """The HEALTHCHECK's options (``--interval`` -> ``10s``) and its CMD."""
        options, _, command = self.one("HEALTHCHECK").partition(" CMD ")
        opts = dict(o.lstrip("-").split("=", 1) for o in options.split())
        value = json.loads(command)
        assert isinstance(value, list), "HEALTHCHECK CMD: write the exec form"
        return opts, value


def _instructions(text: str) -> list[tuple[str, str]]:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    assert not pending, "the container file ends inside a continued line"
    out = []
    for line in lines:
        keyword, _, args = line.partition(" ")
        assert keyword.upper() in _KNOWN, f"deploy/Dockerfile: {keyword} is not looked at"
        out.append((keyword.upper(), args.strip()))
    return out


@cache
def stages() -> tuple[Stage, ...]:
    found: list[Stage] = []
    for keyword, args in _instructions(DOCKERFILE.read_text()):
        if keyword == "FROM":
            m = re.fullmatch(r"(\S+)\s+AS\s+(\S+)", args, re.IGNORECASE)
            assert m, f"FROM {args}: name every stage (FROM image AS name)"
            found.append(Stage(m[1], m[2]))
        elif found:
            found[-1].instructions.append((keyword, args))
    return tuple(found)


def runtime() -> Stage:
    """The stage the image runs: the last one."""
    return stages()[-1]


def service_config() -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(SERVICE_INI.read_text())
    return {name: dict(parser[name]) for name in parser.sections()}


@cache
def kustomized() -> tuple[dict[str, Any], ...]:
    """The objects as kustomize builds them: resources, the generated ConfigMap (``NAME-HASH``,
    referred to so), image tags; only the fields deploy/ uses."""
    kust = yaml.safe_load(KUSTOMIZATION.read_text())
    unknown = set(kust) - {"apiVersion", "kind", "resources", "configMapGenerator", "images"}
    assert not unknown, f"kustomization.yaml: {unknown} is not looked at by the tests"
    objects: list[dict[str, Any]] = []
    for resource in kust["resources"]:
        with (DEPLOY / resource).open() as fh:
            objects += [doc for doc in yaml.safe_load_all(fh) if doc is not None]
    renamed: dict[str, str] = {}
    for generator in kust.get("configMapGenerator", []):
        data = {Path(name).name: (DEPLOY / name).read_text() for name in generator["files"]}
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]
        renamed[generator["name"]] = f"{generator['name']}-{digest}"
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": renamed[generator["name"]]},
                "data": data,
            }
        )
    tags = {image["name"]: image["newTag"] for image in kust.get("images", [])}
    for obj in objects:
        if obj["kind"] != "Deployment":
            continue
        pod = obj["spec"]["template"]["spec"]
        for volume in pod.get("volumes", []):
            if "configMap" in volume and volume["configMap"]["name"] in renamed:
                volume["configMap"]["name"] = renamed[volume["configMap"]["name"]]
        for container in pod["containers"]:
            name = container["image"].rsplit(":", 1)[0]
            if name in tags:
                container["image"] = f"{name}:{tags[name]}"
    return tuple(objects)


def kind(name: str) -> list[dict[str, Any]]:
    return [obj for obj in kustomized() if obj["kind"] == name]


def container() -> dict[str, Any]:
    (deployment,) = kind("Deployment")
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only
