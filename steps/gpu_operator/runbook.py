"""The RUNBOOK's GPU Operator release lines: find the live release, refuse a values file
that would drop a live list, upgrade keeping every user value (cluster-r1 B2).

The wizard's own flow upgrades with ``--reset-values`` and a file that already holds the
live user values merged in (steps/gpu_operator/install.py). The exported file holds only the
wizard's keys, so the runbook cannot use that flag: it upgrades with
``--reset-then-reuse-values`` (helm >= 3.14; helm v3.22 cmd/helm/upgrade.go: "reset the
values to the ones built into the chart, apply the last release's values and merge in any
overrides from the command line via --set and -f"), which pkg/action/upgrade.go
``reuseValues`` implements as ``CoalesceTables(newVals, current.Config)``: the file wins
where both set a key, every other user value of the release stays. Lists are not merged by
that coalesce (pkg/chartutil/coalesce.go: a non-table value of the file replaces the
release's), so a live list with an item the file lacks would be lost: the block stops there.

The two checks run as ``python3 -c`` one-liners (the jump host runs the wizard, so it has
Python 3) so that the block is followable as written; the release rule is the wizard's
(steps/gpu_operator/release.py: one release of the chart, any name and namespace).
"""

from __future__ import annotations

import json
from typing import Any

from steps.common import q
from steps.gpu_operator.release import CHART_PATTERN
from steps.gpu_operator.values import NAMESPACE, RELEASE, VALUES_PATH


def find_release_script() -> str:
    """Reads ``helm list -A -o json``; prints ``GNW_RELEASE=... GNW_NAMESPACE=...`` for the
    one release of the chart (none: the wizard's names, a first install), stops on two."""
    # The wizard's own pattern; its named group left unnamed (the runbook reads <word> as a
    # placeholder to fill in, and the one-liner needs only the match).
    pattern = json.dumps(CHART_PATTERN.pattern.replace("(?P<version>", "("))
    default = json.dumps({"name": RELEASE, "namespace": NAMESPACE})
    return (
        "import json,re,shlex,sys; "
        f'f=[r for r in json.load(sys.stdin) or [] if re.match({pattern}, str(r.get("chart", "")))]; '
        'len(f) > 1 and sys.exit("more than one release of chart gpu-operator: " + '
        '", ".join(r["namespace"] + "/" + r["name"] for r in f) + '
        '"; two operators fight over every GPU node: uninstall all but one"); '
        f"r=(f or [{default}])[0]; "
        'print("GNW_RELEASE=" + shlex.quote(r["name"]), '
        '"GNW_NAMESPACE=" + shlex.quote(r["namespace"]))'
    )


# The one runbook line that finds the release (gpu-operator.preflight's, the first step of the
# phase): every later line that names the release or its namespace reads the two variables,
# exported so that a script the runbook runs (cluster/k8s/pull-secrets.sh) reads them too.
# The python3 output goes through a variable, not straight into `eval "$(...)"`: eval of an
# empty string succeeds, so two releases would not stop a `sh -e` that follows the runbook.
FOUND_VARIABLE = "GNW_FOUND"


def discovery_line(helm_list: str) -> str:
    """``helm_list`` (the runbook's ``helm list -A -o json`` command) piped to the release
    rule, its two variables set and exported, in one line."""
    return (
        f"{FOUND_VARIABLE}=$({helm_list} | python3 -c {q(find_release_script())}); "
        f'eval "${FOUND_VARIABLE}"; export GNW_RELEASE GNW_NAMESPACE  # from the jump host; '
        "the release of chart gpu-operator in any namespace, for every later line "
        f"($GNW_RELEASE, $GNW_NAMESPACE; none: {NAMESPACE}/{RELEASE}, a first install; two: "
        "stops)"
    )


def list_paths(values: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[list[Any]]:
    """[[key path], list] for every list-valued key of ``values``."""
    found: list[list[Any]] = []
    for key, value in values.items():
        if isinstance(value, dict):
            found += list_paths(value, (*prefix, key))
        elif isinstance(value, list):
            found.append([[*prefix, key], value])
    return found


def lists_check_script() -> str:
    """Reads ``helm get values -o json`` (empty: no release yet) and the file's lists (argv 1,
    JSON); stops naming each key whose live list has an item the file's list lacks."""
    return (
        "import functools,json,sys; t=sys.stdin.read().strip(); "
        "v=(json.loads(t) if t else None) or {}; "
        "g=lambda p: functools.reduce(lambda d, k: d.get(k) if isinstance(d, dict) else None, p, v); "
        'bad=[".".join(p) for p, w in json.loads(sys.argv[1]) '
        "if isinstance(g(p), list) and any(i not in w for i in g(p))]; "
        f'bad and sys.exit("the live release sets " + ", ".join(bad) + " with items {VALUES_PATH} '
        "lacks; helm replaces a list, never merges it: add the live items to the file, then "
        'run this block again"); print("no live list is replaced")'
    )


def lists_check(values: dict[str, Any]) -> str:
    """The shell words after the ``helm get values`` pipe: the check and the file's lists."""
    return f"python3 -c {q(lists_check_script())} {q(json.dumps(list_paths(values)))}"
