"""Helm through the ``helm`` CLI on the jump host, with the site's kube context."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
from typing import Any

from wizard import journal
from wizard.facts import ParseError, parse
from wizard.facts.kube import parse_helm_values
from wizard.transports import children
from wizard.transports.base import CommandResult, LineCallback, TransportError

TARGET = "helm"
# helm subcommands that change a release (journaled before they run)
_CHANGING = frozenset({"install", "upgrade", "uninstall", "delete", "rollback"})


class HelmError(TransportError):
    def __init__(self, message: str) -> None:
        super().__init__(TARGET, message)


def helm_argv(binary: str, kubeconfig: str, context: str | None, *args: str) -> list[str]:
    """One helm invocation with the site's cluster (the runbook shows the same argv)."""
    argv = [binary, *args, "--kubeconfig", kubeconfig]
    if context:
        argv += ["--kube-context", context]
    return argv


def get_values_args(release: str, namespace: str) -> list[str]:
    return ["get", "values", release, "--namespace", namespace, "-o", "json"]


# Every release in every namespace, whatever its state (`--all`: pending and failed ones
# too, which an upgrade would otherwise trip over), as JSON.
LIST_ARGS = ["list", "--all-namespaces", "--all", "-o", "json"]


class HelmCli:
    def __init__(self, binary: str, kubeconfig: str, context: str | None = None) -> None:
        self.binary = binary
        self.kubeconfig = os.path.expanduser(kubeconfig)
        self.context = context

    def _argv(self, *args: str) -> list[str]:
        return helm_argv(self.binary, self.kubeconfig, self.context, *args)

    async def run(
        self, *args: str, on_line: LineCallback | None = None, timeout: float = 1800
    ) -> CommandResult:
        argv = self._argv(*args)
        if shutil.which(self.binary) is None:
            if "/" in self.binary and os.path.isfile(self.binary):
                raise HelmError(
                    f"helm ({self.binary}, cluster.helm) is not executable: chmod +x it or set "
                    "cluster.helm to the real helm binary"
                )
            raise HelmError(
                f"helm ({self.binary}) is not installed on this jump host: install Helm 3 or set "
                "cluster.helm in the site file"
            )
        # A release change is journaled ahead (wizard/journal.py); reads are not.
        intent = (
            journal.begin({"target": TARGET, "command": shlex.join(argv)})
            if args[:1] and args[0] in _CHANGING
            else None
        )
        try:
            process = await children.spawn(
                argv, intent, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
        except OSError as exc:  # not a program (exec format error), vanished, no permission
            journal.end(intent, {"error": str(exc)})
            raise HelmError(
                f"cannot run helm ({self.binary}, cluster.helm): {exc.strerror or exc}"
            ) from None
        out: list[str] = []
        err: list[str] = []

        async def pump(stream: asyncio.StreamReader, sink: list[str], name: str) -> None:
            async for raw in stream:
                line = raw.decode(errors="replace")
                sink.append(line)
                if on_line is not None:
                    on_line(name, line.rstrip("\n"))

        try:
            await asyncio.wait_for(
                asyncio.gather(
                    pump(process.stdout, out, "stdout"), pump(process.stderr, err, "stderr")
                ),
                timeout,
            )
            status = await process.wait()
        except TimeoutError:
            process.kill()
            journal.end(intent, {"error": f"timed out after {timeout:g}s"})
            raise HelmError(f"`{shlex.join(argv)}` did not finish within {timeout:g}s") from None
        journal.end(intent, {"exit": status})
        return CommandResult(TARGET, shlex.join(argv), status, "".join(out), "".join(err))

    async def version(self) -> str:
        """The helm version (``v3.16.2``); a helm older than 3 is an error."""
        result = await self.run("version", "--short")
        match = re.search(r"v(\d+)\.(\d+)\.(\d+)", result.stdout)
        if result.exit_status != 0 or not match:
            raise HelmError(
                f"`helm version` failed: {result.stderr.strip() or result.stdout.strip()}"
            )
        if int(match.group(1)) < 3:
            raise HelmError(f"helm {match.group(0)} is too old: Helm 3 is required")
        return match.group(0)

    async def list_releases(self) -> list[dict[str, Any]]:
        """Every release (``helm list -A -a -o json``). Helm 3 prints one object per release
        with ``name``, ``namespace``, ``revision``, ``status``, ``chart`` as
        ``<chart name>-<chart version>`` and ``app_version`` (helm cmd/helm/list.go,
        ``formatChartname``: ``fmt.Sprintf("%s-%s", c.Name(), c.Metadata.Version)``)."""
        result = await self.run(*LIST_ARGS)
        if result.exit_status != 0:
            raise HelmError(f"`helm list` failed: {result.stderr.strip()}")
        try:
            releases = json.loads(result.stdout or "[]") or []
        except json.JSONDecodeError as exc:
            raise HelmError(f"`helm list -o json` printed no JSON: {exc}") from None
        if not isinstance(releases, list):
            raise HelmError("`helm list -o json` printed no list of releases")
        return [r for r in releases if isinstance(r, dict)]

    async def get_values(self, release: str, namespace: str) -> dict[str, Any] | None:
        """The release's user-supplied values, or None when it is not installed."""
        result = await self.run(*get_values_args(release, namespace))
        if result.exit_status != 0:
            if "not found" in result.stderr:
                return None
            raise HelmError(f"`helm get values {release}` failed: {result.stderr.strip()}")
        # Asked for with -o json: a JSON object or null (no values). Read through the
        # helm-values parser (size- and depth-capped): anything else is an error naming the
        # release, not a traceback.
        text = result.stdout.strip() or "null"
        if not (text.startswith("{") or text == "null"):
            raise HelmError(
                f"`helm get values {release} -o json` printed no JSON object: {text[:80]!r}"
            )
        try:
            return parse(parse_helm_values, text).values
        except ParseError as exc:
            raise HelmError(
                f"`helm get values {release}` printed something that is not the values of a "
                f"release: {exc}"
            ) from None
