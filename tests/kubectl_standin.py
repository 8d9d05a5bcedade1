"""A ``kubectl`` for following RUNBOOK.md against the embedded lab, which serves no discovery
endpoints (/api, /apis), so the real kubectl cannot talk to it.

Every call is recorded (one JSON line in ``$GNW_KUBECTL_LOG``: the argv, the namespace it
names, the runbook section in ``$GNW_KUBECTL_SECTION``). The few verbs of the pull-secrets
script act on the lab's API server as kubectl does: ``create namespace NAME --dry-run=client
-o yaml`` prints the Namespace, ``apply -f -`` creates a Namespace read from stdin (one that
exists is unchanged), ``get secret NAME`` reads it (exit 1 when absent, kubectl's NotFound),
``create secret docker-registry`` makes the dockerconfigjson Secret kubectl makes
(kubectl pkg/cmd/create/create_secret_docker.go: ``auths`` with username, password and
``auth`` = base64 of user:password). ``apply -f FILE`` with ``-n`` refuses a file whose
object names another namespace, as kubectl does (cli-runtime pkg/resource/visitor.go
RequireNamespace), and then only records. Every other call (reads of pods, waits, logs,
``--raw``) is recorded and answers nothing with exit 0: what it read is judged from the
record, not from its output.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

import yaml

_GLOBAL_WITH_VALUE = {"-n", "--namespace", "--kubeconfig", "--context"}


def split(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(the global options kubectl reads anywhere: namespace, kubeconfig, context; the rest)."""
    options: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in _GLOBAL_WITH_VALUE and eq:
            options[name.lstrip("-")] = value
        elif arg in _GLOBAL_WITH_VALUE and i + 1 < len(argv):
            options[arg.lstrip("-")] = argv[i + 1]
            i += 1
        else:
            rest.append(arg)
        i += 1
    if "n" in options:
        options["namespace"] = options.pop("n")
    return options, rest


def _flag(rest: list[str], name: str) -> str | None:
    for i, arg in enumerate(rest):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(rest):
            return rest[i + 1]
    return None


class Api:
    def __init__(self, kubeconfig: str) -> None:
        with open(kubeconfig) as handle:
            config = yaml.safe_load(handle)
        self.server = config["clusters"][0]["cluster"]["server"]
        self.token = config["users"][0]["user"].get("token", "")

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, None


def docker_registry_secret(name: str, namespace: str, rest: list[str]) -> dict[str, Any]:
    server = _flag(rest, "--docker-server") or "https://index.docker.io/v1/"
    user = _flag(rest, "--docker-username") or ""
    password = _flag(rest, "--docker-password") or ""
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    config = {"auths": {server: {"username": user, "password": password, "auth": auth}}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": name, "namespace": namespace},
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }


def main(argv: list[str]) -> int:
    options, rest = split(argv)
    namespace = options.get("namespace")
    with open(os.environ["GNW_KUBECTL_LOG"], "a") as log:
        record = {"argv": argv, "namespace": namespace,
                  "section": os.environ.get("GNW_KUBECTL_SECTION", "")}  # fmt: skip
        log.write(json.dumps(record) + "\n")
    api = Api(options.get("kubeconfig") or os.environ["KUBECONFIG"])
    ns = namespace or "default"
    words = [w for w in rest if not w.startswith("-")]
    if words[:2] == ["create", "namespace"] and "--dry-run=client" in rest:
        print(yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": words[2]}}))  # fmt: skip
        return 0
    if words[:1] == ["apply"] and _flag(rest, "-f") == "-":
        for doc in yaml.safe_load_all(sys.stdin.read()):
            if not doc:
                continue
            if doc.get("kind") != "Namespace":
                print(f"the stand-in applies only Namespaces from stdin: {doc.get('kind')}",
                      file=sys.stderr)  # fmt: skip
                return 1
            status, _ = api.call("POST", "/api/v1/namespaces", doc)
            name = doc["metadata"]["name"]
            print(f"namespace/{name} {'created' if status == 201 else 'unchanged'}")
        return 0
    if words[:1] == ["apply"] and _flag(rest, "-f"):
        with open(str(_flag(rest, "-f"))) as handle:
            for doc in yaml.safe_load_all(handle):
                named = (doc or {}).get("metadata", {}).get("namespace")
                if namespace and named and named != namespace:
                    print(f'error: the namespace from the provided object "{named}" does not '
                          f'match the namespace "{namespace}". You must pass '
                          f"'--namespace={named}' to perform this operation.", file=sys.stderr)  # fmt: skip
                    return 1
        return 0
    if words[:2] == ["get", "secret"] and len(words) == 3:
        status, _ = api.call("GET", f"/api/v1/namespaces/{ns}/secrets/{words[2]}")
        if status == 404:
            print(f'Error from server (NotFound): secrets "{words[2]}" not found', file=sys.stderr)
            return 1
        print(f"NAME\n{words[2]}")
        return 0 if status == 200 else 1
    if words[:3] == ["create", "secret", "docker-registry"]:
        status, _ = api.call("POST", f"/api/v1/namespaces/{ns}/secrets",
                             docker_registry_secret(words[3], ns, rest))  # fmt: skip
        if status != 201:
            print(f"Error from server: create secret {ns}/{words[3]}: {status}", file=sys.stderr)
            return 1
        print(f"secret/{words[3]} created")
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
