"""How an operator reaches a node from the jump host by hand, the way the wizard does:
the site's user, port, key, known_hosts (an unknown host key refused unless
``trust_on_first_use``), proxy jump and ssh_config. One source for the Ansible inventory
and the runbook's ``ssh`` command lines."""

from __future__ import annotations

import shlex

from wizard.site import Node, Site, SshSettings


def site_path(site: Site, value: str) -> str:
    """A path as ssh and Ansible take it: ``~`` left for them to expand (the operator's
    home on the control host), otherwise relative to the site file's folder, as the wizard
    reads it."""
    return value if value.startswith("~") else str(site.resolve_path(value))


def ssh_options(site: Site, ssh: SshSettings) -> list[str]:
    """The OpenSSH client options (argv words) for ``ssh``, except user, port and key."""
    options = [
        f"UserKnownHostsFile={site_path(site, ssh.known_hosts)}",
        f"StrictHostKeyChecking={'accept-new' if ssh.trust_on_first_use else 'yes'}",
        f"ConnectTimeout={max(1, round(ssh.connect_timeout))}",
    ]
    if ssh.proxy_jump:
        options.append(f"ProxyJump={ssh.proxy_jump}")
    args = [part for option in options for part in ("-o", option)]
    if ssh.config is not None:
        args = ["-F", "none" if ssh.config == "none" else site_path(site, ssh.config), *args]
    return args


def ssh_command(site: Site, node: Node, *, oob: bool = False) -> list[str]:
    """``ssh ... USER@HOST`` for ``node`` (its out-of-band address with ``oob``, when it
    has one), every word as ssh(1) takes it."""
    ssh = node.ssh
    argv = ["ssh", *ssh_options(site, ssh), "-p", str(ssh.port)]
    if ssh.key is not None:
        argv += ["-i", site_path(site, ssh.key)]
    host = node.oob_host if oob and node.oob_host else node.host
    return [*argv, f"{ssh.user}@{host}"]


def remote_shell(node: Node) -> str:
    """The remote command that reads a script on stdin (``ssh ... CMD < script``): as root
    through ``sudo -n`` when the site's ssh.sudo says so (the wizard's own runs do the
    same), since a non-root shell cannot change DCB, links or configfs."""
    return "sudo -n sh -s" if node.ssh.use_sudo else "sh -s"


def quoted(argv: list[str]) -> str:
    return shlex.join(argv)
