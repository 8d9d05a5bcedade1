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
    """Reads ``helm list -A -o json``; prints ``export GNW_RELEASE=... GNW_NAMESPACE=...``
    for the one release of the chart (none: the wizard's names, a first install), stops on
    two."""
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
        'print("export GNW_RELEASE=" + shlex.quote(r["name"]), '
        '"GNW_NAMESPACE=" + shlex.quote(r["namespace"]))'
    )


def discovery_line(helm_list: str) -> str:
    """The one runbook line that finds the release (gpu-operator.preflight's, the first step
    of the phase): ``helm_list`` (the runbook's ``helm list -A -o json`` command) piped to
    the release rule, whose ``export`` line is evaluated, so that every later line and a
    script the runbook runs (cluster/k8s/pull-secrets.sh) read the two variables. A failed
    rule (two releases, no list) evaluates ``false``: ``eval`` of its empty output would
    succeed, and a ``sh -e`` following the runbook would go on."""
    return (
        f'eval "$({helm_list} | python3 -c {q(find_release_script())} || echo false)"'
        "  # from the jump host; the release of chart gpu-operator in any namespace, "
        "exported for every later line ($GNW_RELEASE, $GNW_NAMESPACE; none: "
        f"{NAMESPACE}/{RELEASE}, a first install; two: stops)"
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
