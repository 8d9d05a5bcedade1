"""The Ansible hand-off for a fleet: an inventory and a playbook with the host-level phases.

The playbook is rendered from the same functions the wizard's own steps use (package
lists, irdma files, the boot scripts and units, and the QoS change script itself), written
per node into host_vars and files/, so the wizard and the playbook can never drift apart.
QoS rolls in ``serial`` batches of ``rollout.maintenance_batch``: refuse an SSH session over
the bond (or one whose route cannot be told), mark the cordon as the play's, drain, the
apply script (un-bond through the bond's manager, DCB, re-bond, ToS), the boot units,
verify, uncordon; a failure in that window says which node it left cordoned, a rerun
uncordons it, and a last play lists every node still carrying the mark.
"""

from __future__ import annotations

import shlex

import yaml

from steps.irdma import INITRAMFS_OPTIONS, MODPROBE_OPTIONS, REBUILD_INITRAMFS, irdma_artifacts
from steps.packages import (
    ANSIBLE_KERNEL,
    install_argv,
    installed_line,
    node_packages,
    query_argv,
)
from steps.qos import DCB_UNIT, TOS_UNIT, BootPersistence, procedure
from steps.remote import site_path, ssh_config, ssh_options
from wizard.artifacts import Artifact, Target, render
from wizard.drain import CORDON_MARK, drain_command, uncordon_command
from wizard.site import Node, Site, SshSettings

# The export's ssh_config (steps/remote.py ssh_config), found from the inventory's folder
# whatever the folder ansible-playbook runs in (inventory_dir is Ansible's magic variable;
# connection variables are templated).
SSH_CONFIG = "{{ inventory_dir }}/ssh_config"

# The QoS play's mark on a cordon it set (kubectl annotate, before the drain): a rerun
# uncordons a node that carries it (a failed run left it cordoned), and never a node
# cordoned without it (someone else's cordon, a hardware fault say). The runbook's lines
# keep the same mark (wizard/drain.py CORDON_MARK).


def ssh_vars(site: Site, ssh: SshSettings) -> dict:
    """How Ansible reaches a node the way the wizard does (steps/remote.py): the site's
    user, port, key, known_hosts, proxy jump and ssh_config, and sudo only when the site
    uses it (``gnw_become``, the plays' ``become:``). Ansible hands
    ``ansible_ssh_common_args`` to ssh, scp and sftp, split as a shell would: each word is
    shell-quoted. ``-F ssh_config`` carries the same settings to a jump hop, which ``-o``
    options never reach; the site's own ssh_config is included from there.
    ``ansible_host_key_checking`` is set so that a global ``host_key_checking = False``
    cannot put ``StrictHostKeyChecking=no`` first (ssh keeps the first value)."""
    options = ssh_options(site, ssh)
    if options[:1] == ["-F"]:
        options = options[2:]  # included by the export's ssh_config instead
    found = {
        "ansible_port": ssh.port,
        "ansible_user": ssh.user,
        # Not ansible_become: a connection variable overrides every task's ``become:``
        # keyword, and the SSH guard must read SSH_CONNECTION as the SSH user (sudo's
        # env_reset drops it). The plays' ``become:`` reads this instead.
        "gnw_become": ssh.use_sudo,
        "ansible_host_key_checking": True,
        "ansible_ssh_common_args": " ".join(shlex.quote(w) for w in ["-F", SSH_CONFIG, *options]),
    }
    if ssh.key is not None:
        found["ansible_ssh_private_key_file"] = site_path(site, ssh.key)
    return found


def host_vars(site: Site, node: Node) -> dict:
    irdma = irdma_artifacts(node)
    packages = node_packages(node.os, ANSIBLE_KERNEL)
    return {
        "ansible_host": node.host,
        **ssh_vars(site, node.ssh),
        # The packages step's own read and install (steps/packages.py), the running
        # kernel's headers named by the node's uname -r (registered as gnw_kernel).
        "gnw_packages": packages,
        "gnw_packages_query": query_argv(node.os, packages),
        "gnw_packages_install": install_argv(node.os, packages),
        "gnw_packages_installed": installed_line(node.os),
        "gnw_bond": node.bond.name,
        "gnw_bond_ports": list(node.bond.ports),
        "gnw_files": [
            {"dest": a.host_path, "content": a.content, "mode": f"{a.mode:04o}"} for a in irdma
        ],
        "gnw_rebuild_initramfs": " ".join(REBUILD_INITRAMFS[node.os]),
        # The irdma.verify step's initramfs read (none where the OS has no lister) and the
        # options line it must find there (a rerun rebuilds until it does).
        "gnw_initramfs_options": INITRAMFS_OPTIONS.get(node.os, []),
        "gnw_irdma_options": next(
            line
            for a in irdma
            if a.host_path == MODPROBE_OPTIONS
            for line in a.content.splitlines()
            if line.startswith("options ")
        ),
        "gnw_boot_files": [
            {"dest": a.host_path, "content": a.content, "mode": f"{a.mode:04o}"}
            for a in BootPersistence().artifacts(site, node)
        ],
    }


def max_fail_percentage(site: Site) -> int:
    """rollout.max_failed_nodes as Ansible's max_fail_percentage.

    Ansible counts failures per batch, the wizard over the whole rollout; with the default
    one-node batches both stop at the first failure beyond the limit. A count becomes the
    share of the fleet it is (rounded down), so the playbook never tolerates more failures
    than the wizard would.
    """
    limit = site.rollout.max_failed_nodes
    if isinstance(limit, str):
        return int(limit.rstrip("%"))
    return 100 * limit // len(site.nodes)


def kubectl(site: Site) -> list[str]:
    """kubectl on the control host with the site's kubeconfig and context, as the wizard
    reaches the cluster (not whatever ~/.kube/config or $KUBECONFIG names there)."""
    argv = ["kubectl", "--kubeconfig", site_path(site, site.cluster.kubeconfig)]
    if site.cluster.context:
        argv += ["--context", site.cluster.context]
    return argv


# The node a play task acts on, as the play names it (Ansible templates it per host).
PLAY_NODE = "{{ inventory_hostname }}"


def drain_tasks(site: Site) -> dict[str, str]:
    """The play's drain and uncordon: wizard/drain.py's commands with the play's kubectl,
    so the play's window is the engine's and the runbook's (timeout, flags)."""
    argv = kubectl(site)
    return {
        "drain": shlex.join(drain_command(PLAY_NODE, kubectl=argv)),
        "uncordon": shlex.join(uncordon_command(PLAY_NODE, kubectl=argv)),
    }


def ansible_artifacts(site: Site) -> list[Artifact]:
    files = [
        Artifact(
            "ansible/inventory.ini",
            render("ansible/inventory.ini.j2", site=site),
            Target.INVENTORY,
            "ansible-playbook -i ansible/inventory.ini",
            "the GPU nodes, grouped",
        ),
        Artifact(
            "ansible/site.yml",
            render(
                "ansible/site.yml.j2",
                site=site,
                units=[DCB_UNIT, TOS_UNIT],
                max_fail_percentage=max_fail_percentage(site),
                kubectl=shlex.join(kubectl(site)),
                **drain_tasks(site),
                cordon_mark=CORDON_MARK,
            ),
            Target.SCRIPT,
            "ansible-playbook -i ansible/inventory.ini ansible/site.yml",
            "the host-level phases for a fleet (packages, irdma, QoS in serial batches, boot unit, verify)",
        ),
    ]
    files.append(
        Artifact(
            "ansible/ssh_config",
            ssh_config(site),
            Target.INVENTORY,
            "ssh -F ansible/ssh_config (the inventory passes it)",
            "how to reach each node and its jump host: user, port, key, known_hosts",
        )
    )
    for node in site.nodes:
        files.append(
            Artifact(
                f"ansible/files/{node.name}/apply-qos.sh",
                procedure(site, node),
                Target.SCRIPT,
                f"run on {node.name} by the QoS play",
                "the wizard's QoS change for this node (the same as nodes/<node>/qos/apply-qos.sh)",
                mode=0o755,
            )
        )
        files.append(
            Artifact(
                f"ansible/host_vars/{node.name}.yml",
                "---\n" + yaml.safe_dump(host_vars(site, node), sort_keys=False, width=1000),
                Target.INVENTORY,
                f"host variables of {node.name}",
                "the exact commands and files the wizard uses for this node",
            )
        )
    return files
