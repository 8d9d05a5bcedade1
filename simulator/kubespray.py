"""A stand-in Kubespray checkout for the lab, run by the real ``ansible-playbook``.

Shaped like Kubespray v2.29.1 where the wizard looks (galaxy.yml ``version: 2.29.1``,
``playbooks/facts.yml``, a top-level ``scale.yml`` that imports ``playbooks/scale.yml``, an
inventory ``hosts.yaml`` with ``kube_control_plane``, ``etcd`` and ``kube_node``), but its
plays are small: facts.yml bootstraps every host as Kubespray's does (a play tagged
``bootstrap_os`` that writes the host's name into its ``/etc/hostname``, here under a per-host
view folder: ``bootstrapped_hosts`` reads them) and then gathers minimal facts from every
host; scale.yml registers each host it is limited to in the lab's Kubernetes API, as kubeadm
join would. The plays' checks are ``raw`` tasks (one shell command, no Python module): a
module task costs Ansible about a second of CPU per host (AnsiballZ packs and starts a
Python process), which made the join the largest cost of a lab run (measured: file, copy
and setup on five hosts 19.5 CPU seconds, the same as raw tasks 1.8), while what the wizard
reads of a run (the playbooks' paths, tags, --limit, the streamed task lines and the PLAY
RECAP) is the real ansible-playbook's either way. Every host uses
Ansible's local connection (group_vars next to the inventory, which Ansible loads for an
inventory file), so the wizard's join runs end to end with real Ansible output and a real
PLAY RECAP, on loopback only.
"""

from __future__ import annotations

from pathlib import Path

import yaml

KUBESPRAY_VERSION = "2.29.1"
JOIN_PATH = "/lab/v1/kubespray/join"

# Kubespray v2.29.1 playbooks/internal_facts.yml, play 1 "Bootstrap hosts for Ansible"
# (hosts: k8s_cluster:etcd:calico_rr, roles: `{ role: bootstrap_os, tags: bootstrap_os }`):
# roles/bootstrap_os/tasks/main.yml sets the hostname to the inventory name
# (`hostname: name: "{{ inventory_hostname }}"` when override_system_hostname, default true in
# roles/bootstrap_os/defaults/main.yml) among its root-level writes (system_packages,
# dnf.conf, RHSM). Play 2 "Gather facts" is `tags: always`, so it runs under --skip-tags too.
BOOTSTRAP_TAG = "bootstrap_os"
HOST_VIEWS = "kubespray-host-views"

_FACTS = """\
---
- name: Bootstrap hosts for Ansible
  hosts: k8s_cluster:etcd
  gather_facts: false
  tags: BOOTSTRAP_TAG
  tasks:
    - name: The host's /etc (lab view)
      ansible.builtin.file:
        path: "{{ lab_host_views }}/{{ inventory_hostname }}/etc"
        state: directory
        mode: "0755"
    - name: Assign inventory name to unconfigured hostnames
      ansible.builtin.copy:
        content: "{{ inventory_hostname }}\\n"
        dest: "{{ lab_host_views }}/{{ inventory_hostname }}/etc/hostname"
        mode: "0644"

- name: Gather facts
  hosts: k8s_cluster
  gather_facts: false
  tags: always
  tasks:
    - name: Gather minimal facts (lab - the host answers)
      ansible.builtin.raw: uname -n
      changed_when: false
""".replace("BOOTSTRAP_TAG", BOOTSTRAP_TAG)

_SCALE_TOP = """\
---
- name: Scale the cluster
  ansible.builtin.import_playbook: playbooks/scale.yml
"""

_SCALE = """\
---
- name: Join the new nodes (lab stand-in for kubeadm join)
  hosts: kube_node
  gather_facts: false
  tasks:
    - name: Check the node answers
      ansible.builtin.raw: uname -n
      changed_when: false
    - name: Join the node to the cluster
      ansible.builtin.uri:
        url: "{{ lab_api }}JOIN_PATH"
        method: POST
        body_format: json
        body: {name: "{{ inventory_hostname }}", ip: "{{ ip | default('') }}"}
        status_code: [200]
      register: joined
      changed_when: joined.json.changed
""".replace("JOIN_PATH", JOIN_PATH)


def bootstrapped_hosts(root: Path) -> dict[str, str]:
    """host -> the hostname the stand-in's bootstrap play wrote on it (the checkout ``root``)."""
    views = root.parent / HOST_VIEWS
    return {p.parent.parent.name: p.read_text().strip() for p in views.glob("*/etc/hostname")}


def write_checkout(root: Path, api_url: str, existing: list[tuple[str, str]]) -> Path:
    """The checkout under ``root``; returns its inventory file. ``existing``: (name, ip) of
    the nodes already in the cluster (the first is the control plane)."""
    (root / "playbooks").mkdir(parents=True, exist_ok=True)
    (root / "galaxy.yml").write_text(
        f"---\nnamespace: kubernetes_sigs\nname: kubespray\nversion: {KUBESPRAY_VERSION}\n"
    )
    (root / "ansible.cfg").write_text(
        "[defaults]\nretry_files_enabled = False\ninterpreter_python = auto_silent\n"
    )
    (root / "scale.yml").write_text(_SCALE_TOP)
    (root / "playbooks" / "scale.yml").write_text(_SCALE)
    (root / "playbooks" / "facts.yml").write_text(_FACTS)
    inventory_dir = root / "inventory" / "lab"
    (inventory_dir / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    control, *workers = existing
    # Written as an operator's hosts.yaml reads (group members as empty keys), with a comment
    # that the wizard's round-trip edit must keep.
    lines = ["# the lab cluster's Kubespray inventory", "all:", "  hosts:"]
    for name, ip in existing:
        lines += [f"    {name}:", f"      ansible_host: {ip}", f"      ip: {ip}"]
    lines += ["  children:", "    kube_control_plane:", "      hosts:", f"        {control[0]}:"]
    lines += ["    etcd:", "      hosts:", f"        {control[0]}:"]
    lines += ["    kube_node:", "      hosts:", *(f"        {name}:" for name, _ in workers)]
    lines += [
        "    k8s_cluster:",
        "      children:",
        "        kube_control_plane:",
        "        kube_node:",
    ]
    path = inventory_dir / "hosts.yaml"
    path.write_text("\n".join(lines) + "\n")
    (inventory_dir / "group_vars" / "all" / "lab.yml").write_text(
        yaml.safe_dump(
            {
                "ansible_connection": "local",
                "ansible_become": False,
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "lab_api": api_url,
                "lab_host_views": str(root.parent / HOST_VIEWS),
            }
        )
    )
    return path
