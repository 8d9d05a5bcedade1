"""The command line: `gpu-node-wizard COMMAND ...` (a contract; see the README).

Exit codes: 0 ok, 1 failed checks, 2 usage / site / connection error, 70 internal error,
130 interrupted.
An expected failure prints one clear message on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from wizard import __version__
from wizard.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    WizardError,
)
from wizard.fleet import is_fleet

log = logging.getLogger("gpu_node_wizard")

DESCRIPTION = """\
Guided installer for NVIDIA B300 GPU nodes with Intel E810 RoCEv2 NICs joining an
existing Kubespray cluster: preflight, host RDMA, bond1, Kubespray join, GPU Operator,
RDMA device plugin, RoCE QoS, GPUDirect proof, AIStor, soak and reboot.
"""

EPILOG = """\
start here:
  gpu-node-wizard demo                      the wizard against the simulated lab
  gpu-node-wizard init site.yaml            write an example site file, then edit it
  gpu-node-wizard export site.yaml --out x  every artifact and RUNBOOK.md, offline
  gpu-node-wizard check site.yaml           read-only preflight of the real site
  gpu-node-wizard run site.yaml             the guided install (resumes)
  gpu-node-wizard status site.yaml          what the checkpoint holds
  gpu-node-wizard schema --out site.schema.json   the site file's JSON Schema, for editors
exit codes: 0 ok, 1 a check failed, 2 usage/site/connection error, 70 internal error
(a bug: the message names the file with the traceback), 130 interrupted
"""


def _control_plane_option(p: argparse.ArgumentParser) -> None:
    """``--control-plane`` for ``demo`` and ``lab``: which cluster the lab serves."""
    p.add_argument(
        "--control-plane",
        choices=("embedded", "real"),
        default="embedded",
        help="embedded (default): the lab's own small API server and a helm stand-in, pip "
        "alone; real: etcd, kube-apiserver, controller-manager, scheduler and helm built from "
        "their Go modules (build them once with `lab --build-control-plane`)",
    )


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where checkpoints live (default: the per-user state directory)",
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="diagnostic logging on stderr (default: warning)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-node-wizard",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("init", help="write a commented example site file")
    p.add_argument("path", nargs="?", default="site.yaml", type=Path, help="default: site.yaml")
    p.add_argument("--name", default="b300-rollout", help="the site name to put in the file")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    _common(p)

    p = sub.add_parser(
        "export",
        help="dry run: render every artifact, RUNBOOK.md and MANIFEST.json (connects to nothing)",
    )
    p.add_argument("site", type=Path, help="the site file")
    p.add_argument("--out", type=Path, required=True, help="an empty (or earlier export) folder")
    p.add_argument("--force", action="store_true", help="replace an earlier export in --out")
    _common(p)

    p = sub.add_parser("status", help="what the checkpoint of a site holds")
    p.add_argument("site", type=Path, help="the site file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _common(p)

    p = sub.add_parser("demo", help="the wizard against the embedded simulated lab")
    p.add_argument("--headless", action="store_true", help="no TUI: run the plan, print a summary")
    _allow_cluster_change(p)
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME",
        help="inject a lab fault, e.g. containerd-1.7 or pfc-not-applied (repeatable; "
        "`gpu-node-wizard lab --list-faults` lists them all)",
    )
    p.add_argument("--nodes", type=int, default=1, help="simulated GPU nodes (default 1)")
    p.add_argument(
        "--report", type=Path, metavar="DIR", help="with --headless: write the run's report here"
    )
    _control_plane_option(p)
    _common(p)

    p = sub.add_parser(
        "run",
        help="the wizard against a real site (TUI; --headless for automation); resumes",
        description="Walk the phases against the site, resuming from the checkpoint. With "
        "--headless, checks run, apply steps need --yes and maintenance gates need "
        "--maintenance-window-open; otherwise the run stops at the first decision and says which.",
    )
    p.add_argument("site", type=Path, help="the site file")
    p.add_argument("--headless", action="store_true", help="no TUI")
    p.add_argument("--yes", action="store_true", help="headless: approve apply steps")
    p.add_argument(
        "--maintenance-window-open",
        action="store_true",
        help="headless: the maintenance window is open (maintenance steps may run)",
    )
    p.add_argument(
        "--allow-storage-load",
        action="append",
        default=[],
        metavar="PEER",
        help="headless: allow measurements to load this production AIStor peer (line-rate "
        "perftest, iperf3, the soak; each run capped at aistor.load_max_seconds); repeat per "
        "peer; never implied by --yes",
    )
    _allow_cluster_change(p)
    p.add_argument(
        "--delete-bare-pod",
        action="append",
        default=[],
        metavar="NAMESPACE/NAME",
        help="headless: let a maintenance drain delete this pod, which declares no controller "
        "(nothing recreates it: its work is lost); repeat per pod; never implied by --yes. "
        "Without it the step stops before the drain, naming such pods",
    )
    p.add_argument("--phase", help="run only this phase (id or number)")
    p.add_argument("--step", help="run only this step (id)")
    p.add_argument(
        "--waive",
        action="append",
        default=[],
        metavar="CHECK=REASON",
        help="accept a failed check by its name, with a reason (recorded)",
    )
    p.add_argument(
        "-v", "--verbose", action="store_true", help="headless: show commands and output"
    )
    p.add_argument(
        "--start-over",
        action="store_true",
        help="forget every recorded step result and begin again (the journal is kept; a "
        "damaged checkpoint is set aside as state.json.damaged-TIME)",
    )
    p.add_argument(
        "--redo",
        action="append",
        default=[],
        metavar="STEP[@NODE]",
        help="forget this step's result (on NODE, or everywhere) and the steps skipped "
        "because of it, so this run does them again: a skip is kept on resume otherwise",
    )
    _common(p)

    p = sub.add_parser(
        "check",
        help="read-only preflight of a site: exit 0 all pass, 1 a check failed, 2 unreachable",
    )
    p.add_argument("site", type=Path, help="the site file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _common(p)

    p = sub.add_parser(
        "lab",
        help="serve the simulated site until stopped, for other processes",
        description="Start the lab (simulated GPU nodes, AIStor peer, cluster, helm) on loopback "
        "and write a site file with its key, known_hosts and kubeconfig beside it.",
    )
    p.add_argument("--write-site", type=Path, metavar="PATH", help="where to write the site file")
    p.add_argument("--nodes", type=int, default=1, help="simulated GPU nodes (default 1)")
    p.add_argument("--fault", action="append", default=[], metavar="NAME", help="inject a fault")
    p.add_argument("--list-faults", action="store_true", help="list the faults and exit")
    _control_plane_option(p)
    p.add_argument(
        "--build-control-plane",
        action="store_true",
        help="build the real control plane (kube-apiserver, controller-manager, scheduler, "
        "etcd, helm) from their Go modules into the cache folder ($GNW_CONTROL_PLANE_CACHE, "
        "default the per-user cache), once; needs Go and the Go module proxy; then exit "
        "unless --write-site is given",
    )
    p.add_argument(
        "--record-effects",
        type=Path,
        metavar="FILE",
        help="append every change the hosts and the cluster receive to FILE (JSON lines)",
    )
    p.add_argument(
        "--kill-on-effect",
        type=Path,
        metavar="CONTROL",
        help='crash tests: SIGKILL the pid in CONTROL ({"pid": N}) right after each new '
        "distinct change, before the wizard sees its answer",
    )
    _common(p)

    p = sub.add_parser(
        "report", help="the T00-T17 report from the checkpoint: Markdown, XLSX and JSON"
    )
    p.add_argument("site", type=Path, help="the site file")
    p.add_argument("--out", type=Path, required=True, help="the folder for report.md/.xlsx/.json")
    p.add_argument(
        "--compare",
        type=Path,
        metavar="REPORT_JSON",
        help="another report.json to show side by side",
    )
    _common(p)

    p = sub.add_parser(
        "schema",
        help="print the site file's JSON Schema (for editors); --out writes it to a file",
        description="The JSON Schema (draft 2020-12) of the site file, generated from the "
        "same model that validates it on load. Point your editor at it, e.g. with the YAML "
        "language server: `# yaml-language-server: $schema=site.schema.json` on the first "
        "line of site.yaml.",
    )
    p.add_argument("--out", type=Path, metavar="FILE", help="write the schema here instead")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    _common(p)

    p = sub.add_parser(
        "parse",
        help="run one parser on one file and print the fact as JSON",
        description="Parse a command's output (FILE, or - for stdin) into the JSON of "
        "docs/FACTS.md (generated from the parsers' types).",
    )
    p.add_argument("kind", nargs="?", help="the output kind (see --list)")
    p.add_argument("file", nargs="?", help="the file to parse, or - for standard input")
    p.add_argument("--list", action="store_true", help="list the kinds and their commands")
    _common(p)
    return parser


# -- commands


def cmd_init(args: argparse.Namespace) -> int:
    from wizard.artifacts import render
    from wizard.site import parse_site

    text = render("site/example-site.yaml.j2", name=args.name)
    parse_site(text, "the built-in example")  # the example must always be valid
    path: Path = args.path
    if path.exists() and not args.force:
        raise UsageError(f"{path} already exists; pass --force to overwrite it")
    try:
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc}") from None
    print(f"wrote {path}: edit the nodes, then `gpu-node-wizard export {path} --out export/`")
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    from wizard.site import json_schema

    text = json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
    if args.out is None:
        sys.stdout.write(text)
        return EXIT_OK
    path: Path = args.out
    if path.exists() and (path.is_dir() or not args.force):
        what = "is a folder" if path.is_dir() else "already exists; pass --force to overwrite it"
        raise UsageError(f"schema --out {path} {what}")
    try:
        path.write_text(text)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise UsageError(f"cannot write {path}: {reason}") from None
    print(f"wrote {path}")
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from steps import build_plan
    from wizard.export import MANIFEST, RUNBOOK, export
    from wizard.site import load_site

    site = load_site(args.site)
    checksums = export(site, build_plan(), args.out, force=args.force)
    print(f"exported {len(checksums)} files to {args.out}")
    print(f"  {args.out / RUNBOOK}: the phases with the exact commands per node")
    print(f"  {args.out / MANIFEST}: sha256 of every file")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from steps import build_plan
    from wizard.checkpoint import default_state_dir
    from wizard.site import load_site
    from wizard.status import format_status, load_status

    site = load_site(args.site)
    status = load_status(args.state_dir or default_state_dir(), site, build_plan())
    if args.json:
        print(json.dumps(status.to_json(), indent=2))
    else:
        print(format_status(status))
    return EXIT_OK


def cmd_parse(args: argparse.Namespace) -> int:
    from wizard.facts import KINDS, MAX_INPUT_BYTES, ParseError, parse

    if args.list:
        width = max(len(k) for k in KINDS)
        for kind in sorted(KINDS):
            print(f"{kind:<{width}}  {KINDS[kind].command}")
        return EXIT_OK
    if not args.kind or not args.file:
        raise UsageError("usage: gpu-node-wizard parse KIND FILE (FILE may be -); parse --list")
    if args.kind not in KINDS:
        raise UsageError(f"unknown kind {args.kind!r}; `gpu-node-wizard parse --list` lists them")
    # At most one byte over the parsers' cap is read: `parse lsmod /dev/zero` is refused
    # by the size check instead of filling the memory.
    try:
        if args.file == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with open(args.file, "rb") as handle:
                data = handle.read(MAX_INPUT_BYTES + 1)
        text = data.decode("utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    try:
        fact = parse(args.kind, text)
    except ParseError as exc:
        print(f"gpu-node-wizard parse: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(fact.to_json(), indent=2))
    return EXIT_OK


def _state_dir(args: argparse.Namespace) -> Path:
    from wizard.checkpoint import default_state_dir

    return args.state_dir or default_state_dir()


def cmd_report(args: argparse.Namespace) -> int:
    from steps import build_plan
    from wizard.redact import Redactor
    from wizard.report import checkpoint_report, write_report
    from wizard.site import load_site

    site = load_site(args.site)
    report = checkpoint_report(_state_dir(args), site, build_plan())
    if report is None:
        raise UsageError(
            f"no checkpoint for site {site.name} yet: run `gpu-node-wizard check` or `run` first"
        )
    paths = write_report(
        report,
        args.out,
        compare=args.compare,
        redactor=Redactor(site.secret_values()),
    )
    for path in paths:
        print(f"wrote {path}")
    return EXIT_OK


def _allow_passphrase_prompt() -> None:
    """Headless commands on a terminal may ask for a locked SSH key's passphrase (once per
    key; the answer decrypts the key in memory and is kept nowhere). The TUI does not:
    a prompt under it would garble the screen, so there a locked key needs the agent or
    ssh.key_passphrase_env."""
    if not sys.stdin.isatty():
        return
    import getpass

    from wizard.transports import ssh

    def prompt(path: Path) -> str | None:
        try:
            return getpass.getpass(f"passphrase for SSH key {path}: ") or None
        except (EOFError, OSError):
            return None

    ssh.PASSPHRASE_PROMPT = prompt


def cmd_check(args: argparse.Namespace) -> int:
    from frontend.headless import HeadlessFrontEnd
    from frontend.runner import dump_json, run_checks
    from steps import build_plan
    from wizard.site import load_site

    site = load_site(args.site)
    _allow_passphrase_prompt()
    quiet = io.StringIO() if args.json else None
    frontend = HeadlessFrontEnd(
        out=quiet or sys.stderr, show_findings=False, compact=is_fleet(len(site.nodes))
    )
    outcome = asyncio.run(run_checks(site, build_plan(), _state_dir(args), frontend))
    print(dump_json(outcome) if args.json else outcome.format())
    return outcome.exit_code


def _redo(args: argparse.Namespace, plan, site) -> None:
    """--redo: forget the named results before the run (and say what was forgotten)."""
    if not args.redo:
        return
    from wizard.checkpoint import Checkpoint
    from wizard.redo import forget_for_redo, parse_redo

    if args.start_over:
        raise UsageError("--redo and --start-over: give one (--start-over forgets every step)")
    redos = [parse_redo(text, plan, site) for text in args.redo]
    with Checkpoint.open(_state_dir(args), site) as checkpoint:
        for redo in redos:
            forgotten = forget_for_redo(checkpoint, plan, site, redo)
            what = ", ".join(forgotten) if forgotten else "nothing was recorded for it"
            print(f"--redo {redo.step}{'@' + redo.target if redo.target else ''}: {what}")


def cmd_run(args: argparse.Namespace) -> int:
    from steps import build_plan
    from wizard.site import load_site

    plan = build_plan()
    if args.phase:
        try:
            plan.phase(args.phase)
        except KeyError:
            raise UsageError(
                f"no phase {args.phase!r}; phases: {', '.join(p.id for p in plan.phases)}"
            ) from None
    if args.step:
        try:
            plan.step(args.step)
        except KeyError:
            raise UsageError(
                f"no step {args.step!r}; `gpu-node-wizard export` lists them in RUNBOOK.md"
            ) from None
    waivers = {}
    for item in args.waive:
        check, _, reason = item.partition("=")
        if not check or not reason.strip():
            raise UsageError(f"--waive {item!r}: write CHECK=REASON (e.g. T11.acs='lab machine')")
        if (hard := plan.hard_requirement(check)) is not None:
            raise UsageError(f"--waive {check}: a hard requirement cannot be waived: {hard}")
        waivers[check] = reason.strip()
    site = load_site(args.site)
    _redo(args, plan, site)
    if not args.headless:
        from frontend.session import Session
        from frontend.tui.app import run_tui
        from wizard.services import build_services

        if args.start_over:
            from wizard.checkpoint import Checkpoint

            with Checkpoint.open(_state_dir(args), site, start_over=True):
                pass
        return run_tui(lambda: _session(Session(site, build_services(site), _state_dir(args))))
    from frontend.headless import HeadlessFrontEnd
    from frontend.runner import run_engine

    _allow_passphrase_prompt()
    frontend = HeadlessFrontEnd(
        yes=args.yes,
        window_open=args.maintenance_window_open,
        allow_storage_load=frozenset(args.allow_storage_load),
        allow_cluster_change=frozenset(args.allow_cluster_change),
        delete_bare_pods=frozenset(args.delete_bare_pod),
        verbose=args.verbose,
        compact=is_fleet(len(site.nodes)),
    )
    outcome = asyncio.run(
        run_engine(
            site,
            plan,
            _state_dir(args),
            frontend,
            phase=args.phase,
            step=args.step,
            waivers=waivers,
            start_over=args.start_over,
        )
    )
    if outcome.internal_errors:
        print(
            "internal error: a bug in gpu-node-wizard stopped a step (see above); the journal "
            f"{_state_dir(args) / site.name / 'journal.jsonl'} has the traceback",
            file=sys.stderr,
        )
    if outcome.summary.stopped:
        print(f"stopped: {outcome.summary.stopped}")
    return outcome.exit_code


async def _session(session):  # an already-open session, for the TUI's opener
    return session


def cmd_lab(args: argparse.Namespace) -> int:
    from simulator.faults import FAULTS, check_faults

    if args.list_faults:
        width = max(len(name) for name in FAULTS)
        for name, description in FAULTS.items():
            print(f"{name:<{width}}  {description}")
        return EXIT_OK
    if args.build_control_plane:
        from simulator.controlplane.build import Builder

        for folder in Builder.here().build_all():
            print(folder)
        if args.write_site is None:
            return EXIT_OK
    if args.write_site is None:
        raise UsageError("lab needs --write-site PATH (or --list-faults, --build-control-plane)")
    _check_lab_nodes(args.nodes)
    try:
        check_faults(args.fault)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    folder = args.write_site.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"lab --write-site {args.write_site}: {folder} is a file, not a folder")
    return asyncio.run(
        _serve_lab(
            args.write_site,
            args.nodes,
            tuple(args.fault),
            args.record_effects,
            args.kill_on_effect,
            args.control_plane,
        )
    )


async def _serve_lab(
    path: Path,
    nodes: int,
    faults: tuple[str, ...],
    record_effects: Path | None = None,
    kill_control: Path | None = None,
    control_plane: str = "embedded",
) -> int:
    import signal

    from simulator.lab import Lab

    lab = Lab(
        path.resolve().parent,
        nodes=nodes,
        faults=faults,
        site_name=path.name,
        record_effects=record_effects,
        kill_control=kill_control,
        control_plane=control_plane,
    )
    try:
        await lab.start()
    except WizardError:
        await lab.stop()
        raise
    except OSError as exc:
        await lab.stop()
        raise UsageError(
            f"lab --write-site {path}: cannot write the lab's files there: {exc.strerror or exc}"
        ) from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"lab serving {nodes} GPU node(s) + {lab.peers} AIStor peer(s); faults: "
          f"{', '.join(faults) or 'none'}")  # fmt: skip
    print(f"site file: {lab.site_path}")
    what = "helm" if control_plane == "real" else "helm stand-in"
    print(f"{what}: {lab.directory / 'bin' / 'helm'} (export PATH={lab.directory / 'bin'}:$PATH)")
    if control_plane == "real":  # the control plane's own kubectl, beside helm
        print(f"kubectl: {lab.directory / 'bin' / 'kubectl'}")
    if lab.real is not None:
        print(f"control plane: real, kube-apiserver at {lab.real.plane.url}")
    print(
        "try: gpu-node-wizard check " + str(lab.site_path) + "   (Ctrl-C stops the lab)", flush=True
    )
    try:
        await stop.wait()
    finally:
        await lab.stop()
    return EXIT_OK


def _allow_cluster_change(p: argparse.ArgumentParser) -> None:
    from wizard.approvals import ClusterChange

    p.add_argument(
        "--allow-cluster-change",
        action="append",
        default=[],
        choices=[c.value for c in ClusterChange],
        metavar="CHANGE",
        help="headless: approve this change outside the new nodes by name ("
        + ", ".join(c.value for c in ClusterChange)
        + "); the review names it and the pods on existing nodes it restarts; repeat per "
        "change; never implied by --yes",
    )


def _check_lab_nodes(nodes: int) -> None:
    """`lab`/`demo --nodes N` outside what the lab serves: a usage error naming the range."""
    from simulator.lab import MAX_NODES

    if not 1 <= nodes <= MAX_NODES:
        raise UsageError(f"--nodes {nodes}: the lab serves 1 to {MAX_NODES} GPU nodes")


def cmd_demo(args: argparse.Namespace) -> int:
    from simulator.faults import check_faults

    _check_lab_nodes(args.nodes)
    try:
        check_faults(args.fault)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _check_lab_nodes(args.nodes)
    if args.control_plane == "real" and args.state_dir is not None:
        raise UsageError("demo --control-plane real: a kept demo (--state-dir) runs embedded only")
    if args.headless:
        from frontend.demo import run_demo_headless
        from wizard.report import prepare_out

        if args.report is not None:  # before the run, not after it
            prepare_out(args.report, "demo --report")

        return asyncio.run(
            run_demo_headless(
                tuple(args.fault),
                args.nodes,
                args.state_dir,
                args.report,
                args.control_plane,
                allow_cluster_change=frozenset(args.allow_cluster_change),
            )
        )
    from frontend.demo import run_demo_tui

    return run_demo_tui(tuple(args.fault), args.nodes, args.state_dir, args.control_plane)


COMMANDS = {
    "demo": cmd_demo,
    "check": cmd_check,
    "run": cmd_run,
    "report": cmd_report,
    "lab": cmd_lab,
    "init": cmd_init,
    "export": cmd_export,
    "status": cmd_status,
    "parse": cmd_parse,
    "schema": cmd_schema,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    try:
        _check_paths(args)
    except UsageError as exc:
        print(f"gpu-node-wizard: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.command != "lab":  # the lab server stops on its own signal handlers
        _stop_on_signals()
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from wizard.redact import redact_logs

    for handler in logging.getLogger().handlers:  # asyncssh's own records too
        redact_logs(handler)
    try:
        return COMMANDS[args.command](args)
    except WizardError as exc:
        from wizard.redact import Redactor

        # The site's own secrets are redacted where they are known (journal, events); an
        # error can come before the site is loaded, so its message gets the patterns.
        print(f"gpu-node-wizard: {Redactor().text(str(exc))}", file=sys.stderr)
        _say_out_of_service(args, resume=False)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        how = (
            _STOPPED_BY[-1]
            if _STOPPED_BY
            else exc.args[0]
            if isinstance(exc, Stopped)
            else "SIGINT (Ctrl-C)"
        )
        print(f"gpu-node-wizard: interrupted by {how}", file=sys.stderr)
        _say_out_of_service(args, resume=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        raise
    except Exception as exc:  # a bug: one clear message, the traceback kept in a file
        where = _crash_report(args, exc)
        print(
            f"gpu-node-wizard: internal error ({type(exc).__name__}: {exc}); this is a bug. "
            f"The traceback is in {where}",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP: the same orderly stop as Ctrl-C (the checkpoint's read-only
    results are written, the lock released), and the same report of what it left."""


# The signal that asked for the stop, for its report (SIGTERM, SIGHUP; Ctrl-C says itself).
_STOPPED_BY: list[str] = []


def _stop_on_signals() -> None:
    def stop(signum: int, frame: object) -> None:
        # Stopped as Ctrl-C stops: asyncio's runner turns a SIGINT into a cancellation of
        # the main task, and without a running loop Python's own handler raises
        # KeyboardInterrupt. Raising here instead could land inside a finaliser or a
        # callback, where Python prints "Exception ignored" and the run goes on.
        _STOPPED_BY.append(signal.Signals(signum).name)
        signal.raise_signal(signal.SIGINT)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)


def _say_out_of_service(args: argparse.Namespace, *, resume: bool) -> None:
    """After any stop of `run` or `check`: which nodes are out of service (mid-change or
    cordoned), read from the checkpoint as the stop left it, and the command that resumes.
    Says nothing when the site or the checkpoint cannot be read (the error said why)."""
    if args.command not in ("run", "check") or not getattr(args, "site", None):
        return
    from wizard.checkpoint import finish_command, load_run, out_of_service, site_state_dir
    from wizard.redact import Redactor
    from wizard.site import load_site

    try:
        site = load_site(args.site)
        run = load_run(site_state_dir(_state_dir(args), site))
    except (WizardError, OSError, ValueError):
        return
    lines = out_of_service(run, site) if run is not None else []
    command = finish_command(site, _state_dir(args))
    redact = Redactor(site.secret_values()).text
    if lines:
        print("out of service now:", file=sys.stderr)
        for line in lines:
            print(f"  {redact(line)}", file=sys.stderr)
        print(f"{command} resumes: it finishes or rolls back each change first", file=sys.stderr)
    elif resume and args.command == "run":
        print(f"no node is out of service; {command} resumes", file=sys.stderr)


# Positional path arguments by their dest, as the usage line names them.
_POSITIONAL_PATHS = {"site": "SITE", "path": "PATH", "file": "FILE"}
PATH_MAX = 4096
NAME_MAX = 255


def _check_paths(args: argparse.Namespace) -> None:
    """Every path on the command line is one the OS can take, or a UsageError naming the
    argument: a NUL byte is a ValueError inside open(), an over-long name ENAMETOOLONG
    wherever the path is first used (a state folder, a report, a lab)."""
    for dest, value in vars(args).items():
        if not isinstance(value, Path) and not (dest == "file" and isinstance(value, str)):
            continue
        name = _POSITIONAL_PATHS.get(dest, f"--{dest.replace('_', '-')}")
        raw = os.fsencode(str(value))
        if b"\0" in raw:
            raise UsageError(f"{name}: the path contains a NUL byte")
        if len(raw) > PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
            raise UsageError(
                f"{name}: the path is too long ({len(raw)} bytes; at most {PATH_MAX}, "
                f"{NAME_MAX} per name)"
            )


def _crash_report(args: argparse.Namespace, exc: BaseException) -> str:
    """Write the traceback of an unexpected exception to a private file; its path."""
    import tempfile
    import traceback

    from wizard.checkpoint import default_state_dir
    from wizard.private import private_dir

    directory = getattr(args, "state_dir", None) or default_state_dir()
    text = "".join(traceback.format_exception(exc))
    try:
        private_dir(directory)
        fd, path = tempfile.mkstemp(prefix="crash-", suffix=".txt", dir=directory)
        with os.fdopen(fd, "w") as handle:  # mkstemp makes it 0600
            handle.write(text)
        return path
    except OSError:
        print(text, file=sys.stderr)
        return "the text above"


def entry() -> None:
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # `gpu-node-wizard status SITE | head`: the reader left, which is no error worth a
        # traceback. Point stdout at /dev/null so the interpreter's final flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_BROKEN_PIPE
    sys.exit(code)


if __name__ == "__main__":
    entry()
