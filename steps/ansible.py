"""The Ansible hand-off for a fleet: an inventory and a playbook with the host-level phases.

The playbook is rendered from the same functions the wizard's own steps use (package
lists, irdma files, the boot scripts and units, and the QoS change script itself), written
per node into host_vars and files/, so the wizard and the playbook can never drift apart.
QoS rolls in ``serial`` batches of ``rollout.maintenance_batch``: refuse an SSH session over
the bond, drain, the apply script (un-bond through the bond's manager, DCB, re-bond, ToS),
the boot units, verify, uncordon.
"""

from __future__ import annotations

import shlex

import yaml

from steps.irdma import REBUILD_INITRAMFS, irdma_artifacts
from steps.packages import ANSIBLE_KERNEL, node_packages
from steps.qos import DCB_UNIT, TOS_UNIT, BootPersistence, procedure
from steps.remote import site_path, ssh_config, ssh_options
from wizard.artifacts import Artifact, Target, render
from wizard.site import Node, Site, SshSettings

# The export's ssh_config (steps/remote.py ssh_config), found from the inventory's folder
# whatever the folder ansible-playbook runs in (inventory_dir is Ansible's magic variable;
# connection variables are templated).
SSH_CONFIG = "{{ inventory_dir }}/ssh_config"


def ssh_vars(site: Site, ssh: SshSettings) -> dict:
    """How Ansible reaches a node the way the wizard does (steps/remote.py): the site's
    user, port, key, known_hosts, proxy jump and ssh_config, and sudo only when the site
    uses it. Ansible hands ``ansible_ssh_common_args`` to ssh, scp and sftp, split as a
    shell would: each word is shell-quoted. ``-F ssh_config`` carries the same settings to
    a jump hop, which ``-o`` options never reach; the site's own ssh_config is included
    from there. ``ansible_host_key_checking`` is set so that a global
    ``host_key_checking = False`` cannot put ``StrictHostKeyChecking=no`` first (ssh keeps
    the first value)."""
    options = ssh_options(site, ssh)
    if options[:1] == ["-F"]:
        options = options[2:]  # included by the export's ssh_config instead
    found = {
        "ansible_port": ssh.port,
        "ansible_user": ssh.user,
        "ansible_become": ssh.use_sudo,
        "ansible_host_key_checking": True,
        "ansible_ssh_common_args": " ".join(shlex.quote(w) for w in ["-F", SSH_CONFIG, *options]),
    }
    if ssh.key is not None:
        found["ansible_ssh_private_key_file"] = site_path(site, ssh.key)
    return found


def host_vars(site: Site, node: Node) -> dict:
    irdma = irdma_artifacts(node)
    return {
        "ansible_host": node.host,
        **ssh_vars(site, node.ssh),
        # The running kernel's headers by Ansible's own uname -r (the ansible_kernel fact).
        "gnw_packages": node_packages(node.os, ANSIBLE_KERNEL),
        "gnw_bond": node.bond.name,
        "gnw_bond_ports": list(node.bond.ports),
        "gnw_files": [
            {"dest": a.host_path, "content": a.content, "mode": f"{a.mode:04o}"} for a in irdma
        ],
        "gnw_rebuild_initramfs": " ".join(REBUILD_INITRAMFS[node.os]),
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
