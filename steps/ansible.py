"""The Ansible hand-off for a fleet: an inventory and a playbook with the host-level phases.

The playbook is rendered from the same functions the wizard's own steps use (package
lists, irdma files, the per-port QoS commands, the boot unit and script), written per node
into host_vars, so the wizard and the playbook can never drift apart. QoS rolls in
``serial`` batches of ``rollout.maintenance_batch`` with the drain / un-bond / apply /
re-bond / uncordon sequence.
"""

from __future__ import annotations

import yaml

from steps.irdma import irdma_artifacts
from steps.packages import PACKAGES
from steps.qos import FACTORY, SCRIPT_PATH, UNIT, UNIT_PATH, boot_script, boot_unit, port_commands
from wizard.artifacts import Artifact, Target, render
from wizard.site import Node, Site

RDMA_DEV = "{{ rdma_dev }}"  # discovered on each host by the playbook itself


def host_vars(site: Site, node: Node) -> dict:
    irdma = irdma_artifacts(node)
    return {
        "ansible_host": node.host,
        "ansible_port": node.ssh.port,
        "ansible_user": node.ssh.user,
        "gnw_packages": list(PACKAGES[node.os]),
        "gnw_bond": node.bond.name,
        "gnw_bond_ports": list(node.bond.ports),
        "gnw_files": [
            {"dest": a.host_path, "content": a.content, "mode": f"{a.mode:04o}"} for a in irdma
        ],
        "gnw_qos_commands": [
            c for port in node.bond.ports for c in port_commands(site, port, FACTORY)
        ],
        "gnw_roce_tos": site.qos.roce_tos,
        "gnw_boot_script": boot_script(site, node, RDMA_DEV),
        "gnw_boot_unit": boot_unit(node),
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
                unit=UNIT,
                unit_path=UNIT_PATH,
                script_path=SCRIPT_PATH,
                max_fail_percentage=max_fail_percentage(site),
            ),
            Target.SCRIPT,
            "ansible-playbook -i ansible/inventory.ini ansible/site.yml",
            "the host-level phases for a fleet (packages, irdma, QoS in serial batches, boot unit, verify)",
        ),
    ]
    for node in site.nodes:
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
