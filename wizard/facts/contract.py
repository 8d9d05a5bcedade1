"""The facts contract, generated from the parsers' declared types: docs/FACTS.md.

Each parser's return annotation is its typed fact (a ``Fact`` dataclass, with TypedDicts
for the rows it returns as plain dicts). Pydantic's ``TypeAdapter`` turns that type into a
JSON Schema, and this module renders the schemas into one Markdown document, so the code
and the written contract cannot disagree: tests/facts/test_contract_doc.py fails when the
committed document is not what this module renders, and validates every sample's JSON
against its kind's schema.

    python -m wizard.facts.contract --write docs/FACTS.md   # regenerate
    python -m wizard.facts.contract --check docs/FACTS.md   # exit 1 when out of date

Where the contract differs from the project's first written one (../shared/FACTS.md, a
reference document the parsers started from), ``SHARED_KEYS`` holds what that document
promised and ``DIFFERENCES`` says why the code goes further; the document prints both.
"""

from __future__ import annotations

import argparse
import json
import sys
import typing
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from wizard.facts import KINDS, Fact

# The top-level keys ../shared/FACTS.md lists for each kind it names (kinds added later
# are absent). tests/facts/test_contract_doc.py checks these against that file.
SHARED_KEYS: dict[str, tuple[str, ...]] = {
    "os-release": ("id", "version_id", "name", "pretty_name", "id_like"),
    "ethtool-i": ("driver", "version", "firmware_version", "bus_info", "in_tree"),
    "bonding": ("mode", "is_8023ad", "transmit_hash_policy", "mii_status", "lacp_rate",
                "active_aggregator_id", "slaves"),
    "lsmod": ("modules",),
    "lspci": ("devices",),
    "lspci-acs": ("acs", "any_enabled"),
    "iommu": ("default_domain", "set_via_cmdline", "dmar_enabled"),
    "rdma-link": ("links",),
    "rdma-dev": ("devices",),
    "ibv-devices": ("devices",),
    "ibv-devinfo": ("devices", "errors"),
    "show-gids": ("gids",),
    "nvidia-smi-l": ("gpus",),
    "nvidia-smi": ("driver_version", "cuda_version", "gpus"),
    "nvidia-smi-topo": ("devices", "matrix", "nic_legend", "cpu_affinity", "numa_affinity"),
    "dcb-pfc": ("prio_pfc", "pfc_cap", "delay", "macsec_bypass"),
    "dcb-ets": ("willing", "ets_cap", "cbs", "tc_bw", "tc_tsa", "prio_tc"),
    "dcb-app": ("dscp_prio",),
    "ethtool-s": ("counters", "prio_pause"),
    "perftest": ("test", "device", "link_type", "transport", "mtu", "gid_index", "qps",
                 "rdma_cm", "tos", "units", "results", "error", "warnings"),
    "nccl-log": ("version", "net_devices", "oob", "socket_only", "env", "dmabuf_gpus",
                 "gdr_disabled", "channels", "verdict"),
    "nccl-tests": ("rows", "avg_busbw", "out_of_bounds"),
    "containerd-version": ("version", "major", "minor", "patch", "revision"),
    "kube-nodes": ("nodes",),
    "kube-node-resources": ("capacity", "allocatable"),
    "kube-pods": ("pods", "healthy"),
    "helm-values": ("values",),
}  # fmt: skip

# The nested keys ../shared/FACTS.md lists (in its `{...}` groups), by the schema type that
# holds them. tests/facts/test_contract_doc.py checks these against that file too.
SHARED_NESTED: dict[str, dict[str, tuple[str, ...]]] = {
    "bonding": {
        "BondSlave": (
            "name",
            "mii_status",
            "speed_mbps",
            "duplex",
            "permanent_hw_addr",
            "aggregator_id",
            "link_failure_count",
        ),
    },
    "lsmod": {
        "ModuleInfo": ("size", "used_by_count", "used_by"),
    },
    "lspci": {
        "PciDevice": (
            "slot",
            "class_name",
            "class_id",
            "vendor_id",
            "device_id",
            "description",
            "rev",
        ),
    },
    "lspci-acs": {
        "AcsControl": ("slot", "src_valid", "ctl"),
    },
    "rdma-link": {
        "RdmaLink": ("device", "port", "state", "physical_state", "netdev"),
    },
    "rdma-dev": {
        "RdmaDevice": ("index", "name", "node_type", "fw", "node_guid", "sys_image_guid"),
    },
    "ibv-devices": {
        "IbvDevice": ("name", "node_guid"),
    },
    "ibv-devinfo": {
        "Gid": ("index", "gid", "type"),
        "IbvHca": (
            "hca_id",
            "transport",
            "fw_ver",
            "node_guid",
            "vendor_id",
            "vendor_part_id",
            "hw_ver",
            "phys_port_cnt",
            "ports",
        ),
        "IbvPort": ("port", "state", "max_mtu", "active_mtu", "link_layer", "gids"),
    },
    "show-gids": {
        "ShowGid": ("dev", "port", "index", "gid", "ipv4", "ver", "netdev"),
    },
    "nvidia-smi-l": {
        "GpuId": ("index", "name", "uuid"),
    },
    "nvidia-smi": {
        "GpuStatus": ("index", "name", "memory_used_mib", "memory_total_mib", "util_percent"),
    },
    "ethtool-s": {
        "PauseCounts": ("rx", "tx"),
    },
    "perftest": {
        "PerftestRow": (
            "bytes",
            "iterations",
            "bw_peak",
            "bw_average",
            "msg_rate_mpps",
            "t_min_us",
            "t_max_us",
            "t_typical_us",
            "t_avg_us",
            "t_stdev_us",
            "p99_us",
            "p99_9_us",
        ),
    },
    "nccl-log": {
        "Endpoint": ("if", "ip"),
        "GdrDisabled": ("hca", "reason"),
        "NcclChannel": ("channel", "direction", "transport", "device_index", "gdr", "shared"),
        "NetDevice": ("index", "name", "port", "link_layer"),
    },
    "nccl-tests": {
        "NcclTestsRow": (
            "size",
            "count",
            "type",
            "redop",
            "root",
            "oop_time_us",
            "oop_algbw",
            "oop_busbw",
            "oop_wrong",
            "ip_time_us",
            "ip_algbw",
            "ip_busbw",
            "ip_wrong",
        ),
    },
    "kube-nodes": {
        "KubeNode": (
            "name",
            "status",
            "roles",
            "age",
            "version",
            "internal_ip",
            "os_image",
            "kernel_version",
            "container_runtime",
        ),
    },
    "kube-pods": {
        "KubePod": ("namespace", "name", "ready", "status", "restarts", "last_restart", "age"),
    },
}

# Why the code's contract goes beyond (or reads differently from) ../shared/FACTS.md.
DIFFERENCES: dict[str, str] = {
    "bonding": "adds `active_slave` (active-backup bonds name the slave in use; a "
    "check on such a bond needs it).",
    "containerd-version": "adds `module` (the package path: `/v2` from containerd 2.x, "
    "`containerd.io` for Docker's package). `version` is the version as printed without "
    "the leading `v`, so a distribution's own suffix stays (Ubuntu's "
    "`1.4.4-0ubuntu1~20.04.2`); `major`/`minor`/`patch` are its first three numbers and "
    "`revision` is null when the package prints none.",
    "dcb-app": "adds `default_prio` and `other` (the ethtype, port and pcp selectors "
    "`dcb app show` prints beside dscp-prio), so that nothing the tool printed is lost.",
    "ethtool-i": "adds `nvm_version` (Intel prints the NVM version as the first word of "
    "`firmware-version`; the E810 checks compare it) and `supports_priv_flags`. `in_tree` is "
    "also true for a plain version from 3 up on ice and i40e, whose out-of-tree releases are "
    "numbered below 3: that is a mainline kernel's release (`6.8.2`), which the kernel fills "
    "in for a driver that sets no version; on any other driver a plain version is null "
    "(its own release numbers are not known).",
    "ibv-devinfo": "each HCA carries `board_id` (ibv_devinfo's `board_id:` line, e.g. "
    "`MT_0000000838`: which board the HCA is, beside its vendor part id).",
    "iommu": "adds `amd_iommu` (AMD-Vi lines: an AMD host has no DMAR lines at all).",
    "modinfo": "a kind FACTS.md does not name: the irdma/ice module checks need the file "
    "(in tree or out of tree), version, vermagic, dependencies and parameter names.",
    "nccl-log": "adds `cuda` (the +cudaX.Y of the version banner), `warnings` (every "
    "distinct `NCCL WARN` message), `no_transport` (NCCL found no transport for a peer: "
    "the job cannot run) and `bootstrap` (the bootstrap interface); `gdr_disabled` "
    "entries carry the HCA's `index` too. A channel's transport keeps a network plugin's "
    "name whole (`NET/AWS Libfabric` from `via NET/AWS Libfabric/0`).",
    "nccl-tests": "adds `test` (the `Collective test starting:` name newer nccl-tests print). "
    "One test per log: a second `Collective test starting:` or table header is refused.",
    "nvidia-smi": "each GPU carries `bus_id` (to match a GPU row with lspci and the "
    "topology). The banner (the line naming `NVIDIA-SMI`, no other) is read by label: "
    "`KMD Version` / `CUDA UMD Version` (driver 610 on) and the older `Driver Version` / "
    "`CUDA Version`; GPU rows are read from the banner or the `GPU  Name` header on. A GPU's memory and "
    "utilisation come from its own second table line only: `N/A` (MIG on) is null, never "
    "a number from the MIG devices table. Windows' driver model (`WDDM`, `TCC`) stands where "
    "Linux prints the persistence mode.",
    "os-release": "adds `version` and `fields` (every KEY=value line, unquoted).",
    "rdma-link": "the same keys; the first rdma tool's `0/1: mlx5_0/1: state ...` lines are read "
    "as well as today's `link mlx5_0/1 state ...`.",
    "rdma-dev": "the same keys; `rdma -j` JSON is recognised by what it prints (`[{` or `[]`), so "
    "a pasted prompt such as `[user@host ~]$ rdma dev` is read as text.",
    "nvidia-smi-topo": "the same keys, read by two rules FACTS.md does not state: cells are "
    "split on the tabs nvidia-smi prints, so an empty CPU Affinity cell is null and the NUMA "
    "node is not read as a CPU list; and a cell nvidia-smi printed without its separating tab "
    "(`PXBNODE`, `SYSSYS`, ` X NODE` on 8x B200 with 16 NICs) is the two links it holds.",
    "perftest": "adds `kind` (`bw` or `lat`: which table the run printed); bandwidth rows "
    "may carry `cpu_util_percent` (perftest's --cpu_util column).",
    "ethtool-priv-flags": "a kind FACTS.md does not name: the E810 checks read the ice "
    "driver's private flags (e.g. `fw-lldp-agent`) by name.",
    "ip-addr": "a kind FACTS.md does not name: which interface owns an address, its "
    "bond master and state, read from `ip -j addr` (JSON, so no layout to guess); the empty "
    "objects older `ip --json --brief` prints for filtered-out interfaces are skipped.",
    "packages": "a kind FACTS.md does not name: installed and missing packages from "
    "`rpm -q` or `dpkg-query -W`.",
    "dcgm-metrics": "a kind FACTS.md does not name: the dcgm-exporter's /metrics page "
    "(Prometheus text format, read by prometheus_client's parser), one entry per GPU with its "
    "DCGM fields by metric name (a MIG GPU's largest sample) and the XID codes' messages; "
    "NVLink and NVSwitch samples are not GPU facts.",
    "rdma-hw-counters": "a kind FACTS.md does not name: the RDMA device's hardware "
    "counters (irdma's cnpSent, RxECNMrkd ...) as `grep -H . .../hw_counters/*` prints them "
    "(also through /sys/devices/... and the port's PMA counters/ files); a file whose value is "
    "not a number (`N/A (no PMA)`) is listed in `unreadable`, never given a number. One fact is "
    "one device's port: lines of a second device or port are refused.",
}

# Kinds with fewer than three real outputs found (tests/facts/samples plus
# ../shared/fixtures; strings quoted in other projects' unit tests are checked but not
# counted): the count and why. Their parsers stay strict (only the documented form).
# tests/facts/test_samples.py holds the count to what the folders have.
SCARCE: dict[str, tuple[int, str]] = {
    "rdma-hw-counters": (
        1,
        "no real `grep -H` of an irdma device's hw_counters was found in public issues, docs "
        "or code; the real one is an i40iw device's PMA counters (node_exporter#966), and a "
        "ConnectX-7 port's sysfs files quoted in a TypeScript test are checked but not counted",
    ),
}

HEADER = """\
# Facts contract: `gpu-node-wizard parse KIND FILE`

<!-- Generated by `python -m wizard.facts.contract --write docs/FACTS.md` from the
parsers' declared types; do not edit by hand. tests/facts/test_contract_doc.py fails when
this file is not what the code declares. -->

Every parser turns one command's output into JSON. `parse KIND FILE` (FILE may be `-` for
standard input) prints that JSON and exits 0; `parse --list` prints the kinds. Input that is
not the expected output at all (empty, another command's, binary) exits 1 with a one-line
reason on stderr, never a traceback.

Rules every kind follows:

- Absent information is `null` (or an empty list or object), never a guessed value, and a
  value is never borrowed from another table of the same output.
- Leading `# source:` / `# note:` lines are skipped (the samples' headers); CRLF line ends,
  tabs for spaces, trailing spaces and colour codes are text like any other.
- The table parsers (`nccl-tests`, `nvidia-smi`, `nvidia-smi-topo`, `perftest`) strip what
  launchers put in front of every line: `mpirun --tag-output`'s `[1,0]<stdout>:`, SkyPilot's
  `(head, rank=0, pid=N) `, `kubectl logs --prefix` and `--timestamps`, stacked in any order.
  `srun --label`'s `0: ` and MPICH's `-prepend-rank` `[0] ` count only when every line
  carries one (a `0: ` on some lines is content). The prefix names the stream (rank, pod) a
  line came from: the table is read from the one stream that holds it, and table lines in
  more than one stream (every rank printed its own) are refused (exit 1), never mixed; so
  is an nccl-tests log of more than one test.
- Labels that changed between releases are read under each name (see the kinds below).
- Every parser is linear in its input and bounded (64 MB at most; tests/facts/test_fuzz.py).

Each kind below lists its keys with their JSON types, the keys `../shared/FACTS.md` (the
first written contract) did not have and why, and the JSON Schema the types generate.
Real outputs of every kind, at least three each except the scarce kinds listed here, with
the values a person reads off them, are in `tests/facts/samples/KIND/` and
`../shared/fixtures/KIND/` (values in `tests/facts/shared_expected/KIND/`); strings quoted
in other projects' unit tests are checked too but not counted as real outputs. Scarce:

{scarce}

| kind | command | fact type |
|---|---|---|
"""


def fact_type(kind: str) -> type[Fact]:
    """The fact class the parser of ``kind`` declares it returns."""
    declared = typing.get_type_hints(KINDS[kind].function)["return"]
    if not (isinstance(declared, type) and issubclass(declared, Fact)):
        raise TypeError(f"the parser of {kind} does not declare a Fact return type")
    return declared


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of ``kind``'s fact as its JSON (``to_json``) is serialised."""
    return TypeAdapter(fact_type(kind)).json_schema(mode="serialization")


def _type_text(node: dict[str, Any], defs: dict[str, Any]) -> str:
    """A JSON Schema node as a short human type: ``int or null``, ``list of GpuStatus``."""
    if "$ref" in node:
        return node["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in node:
        parts = [_type_text(part, defs) for part in node["anyOf"]]
        return " or ".join(dict.fromkeys(parts))
    kind = node.get("type")
    if kind == "array":
        items = node.get("items")
        return f"list of {_type_text(items, defs)}" if items else "list"
    if kind == "object":
        values = node.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"object of string -> {_type_text(values, defs)}"
        return "object"
    return {
        "integer": "int",
        "number": "number",
        "string": "string",
        "boolean": "bool",
        "null": "null",
    }.get(kind, "any")


def _key_table(
    properties: dict[str, Any], defs: dict[str, Any], shared: tuple[str, ...] | None
) -> list[str]:
    """Every key (the JSON always carries all of them, defaults included) and which ones
    ../shared/FACTS.md did not list."""
    lines = ["| key | type | |", "|---|---|---|"]
    for name, node in properties.items():
        note = "not in ../shared/FACTS.md" if shared is None or name not in shared else ""
        lines.append(f"| `{name}` | {_type_text(node, defs)} | {note} |")
    return lines


def _definitions(defs: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for name, node in defs.items():
        properties = node.get("properties", {})
        fields = ", ".join(
            f"`{key}` ({_type_text(value, defs)})" for key, value in properties.items()
        )
        lines.append(f"- `{name}`: {fields}")
    return lines


def render() -> str:
    """The whole contract document."""
    kinds = sorted(KINDS)
    scarce = "\n".join(
        f"- `{kind}` ({count} real output{'s' if count != 1 else ''}): {why}."
        for kind, (count, why) in sorted(SCARCE.items())
    )
    out = [HEADER.replace("{scarce}", scarce).rstrip("\n")]
    for kind in kinds:
        command = KINDS[kind].command.replace("|", "\\|")
        out.append(f"| [`{kind}`](#{kind}) | `{command}` | `{fact_type(kind).__name__}` |")
    for kind in kinds:
        document = schema(kind)
        defs = document.get("$defs", {})
        shared = SHARED_KEYS.get(kind)
        out += ["", f"## {kind}", ""]
        out.append(f"`{KINDS[kind].command}` -> `{fact_type(kind).__name__}`")
        out.append("")
        out += _key_table(document["properties"], defs, shared)
        if defs:
            out += ["", "Nested types:", ""]
            out += _definitions(defs)
        out += ["", "Against ../shared/FACTS.md: "]
        why = difference(kind)
        if shared is None:
            out[-1] += why or "a kind it does not name."
        else:
            # What the types hold beyond it, found by comparing them (never only written):
            # a key added after the reason was written still shows here.
            added = added_keys(kind)
            if added:
                out[-1] += f"keys it does not list: {', '.join(f'`{a}`' for a in added)}. "
            if why:
                out[-1] += f"Why: {why}" if added else why
            elif not added:
                out[-1] += "the same keys."
        out[-1] = out[-1].rstrip()
        out += ["", "<details><summary>JSON Schema</summary>", "", "```json"]
        out.append(json.dumps(document, indent=2, sort_keys=True))
        out += ["```", "", "</details>"]
    return "\n".join(out) + "\n"


def added_keys(kind: str) -> list[str]:
    """The keys the kind's types hold that ../shared/FACTS.md does not list: top-level
    ones by name, nested ones as ``Type.key`` (a nested type it does not describe at all
    adds every key). Empty for a kind it does not name."""
    shared = SHARED_KEYS.get(kind)
    if shared is None:
        return []
    document = schema(kind)
    added = [key for key in document["properties"] if key not in shared]
    listed = SHARED_NESTED.get(kind, {})
    for name, node in document.get("$defs", {}).items():
        keys = listed.get(name, ())
        added += [f"{name}.{key}" for key in node.get("properties", {}) if key not in keys]
    return added


def difference(kind: str) -> str:
    """Why ``kind``'s contract differs from ../shared/FACTS.md: its ``DIFFERENCES`` entry;
    for a kind that document does not name and ``DIFFERENCES`` does not list (a kind added
    since), the first paragraph of its parser's docstring, which says what it reads; so a
    new parser documents itself where it is written."""
    why = DIFFERENCES.get(kind)
    if why is not None or kind in SHARED_KEYS:
        return why or ""
    doc = (KINDS[kind].function.__doc__ or "").strip().split("\n\n")[0]
    return f"a kind FACTS.md does not name: {' '.join(doc.split())}" if doc else ""


def undeclared_differences() -> list[str]:
    """Kinds FACTS.md does not name without a written reason, and every key beyond it
    (nested ones too) that its kind's reason does not name in backticks: ``kind`` or
    ``kind: Type.key``."""
    missing = []
    for kind in sorted(KINDS):
        why = difference(kind) or None
        if kind not in SHARED_KEYS:
            if why is None:
                missing.append(kind)
            continue
        for key in added_keys(kind):
            if f"`{key.rsplit('.', 1)[-1]}`" not in (why or ""):
                missing.append(f"{kind}: {key}")
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m wizard.facts.contract",
        description="Render the facts contract (docs/FACTS.md) from the parsers' types.",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", metavar="FILE", help="write the document to FILE")
    action.add_argument("--check", metavar="FILE", help="exit 1 when FILE is out of date")
    args = parser.parse_args(argv)
    document = render()
    if args.write:
        Path(args.write).write_text(document)
        return 0
    if args.check:
        try:
            current = Path(args.check).read_text()
        except OSError as exc:
            print(f"cannot read {args.check}: {exc.strerror}", file=sys.stderr)
            return 2
        if current != document:
            print(
                f"{args.check} is out of date: run python -m wizard.facts.contract "
                f"--write {args.check}",
                file=sys.stderr,
            )
            return 1
        return 0
    sys.stdout.write(document)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
