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
        # Quoted inside the value: ssh splits UserKnownHostsFile into several files at
        # whitespace, so a folder with a space would otherwise name two files.
        f"UserKnownHostsFile={_config_word(site_path(site, ssh.known_hosts), tokens=True)}",
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


def _config_word(value: str, *, tokens: bool = False) -> str:
    """A value as ssh_config(5) reads it: in double quotes, with the backslash escapes of
    OpenSSH's argv_split (misc.c) for ``\\`` and ``"``, and ``%`` doubled where ssh
    expands %-tokens (IdentityFile, UserKnownHostsFile)."""
    if tokens:
        value = value.replace("%", "%%")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def split_jump(jump: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` (ProxyJump's syntax, ``[v6]:port`` for IPv6) as its parts."""
    user, _, rest = jump.rpartition("@")
    port: int | None = None
    if rest.startswith("[") and "]" in rest:
        host, _, tail = rest[1:].partition("]")
        port = int(tail[1:]) if tail.startswith(":") and tail[1:].isdigit() else None
    elif rest.count(":") == 1 and rest.partition(":")[2].isdigit():
        host, port = rest.partition(":")[0], int(rest.partition(":")[2])
    else:
        host = rest
    return user or None, host, port


def _block(site: Site, pattern: str, ssh: SshSettings, *, user: str, port: int | None,
           jump: str | None) -> list[str]:  # fmt: skip
    lines = [f"Host {pattern}", f"    HostName {pattern}", f"    User {user}"]
    if port is not None:
        lines.append(f"    Port {port}")
    if ssh.key is not None:
        lines.append(f"    IdentityFile {_config_word(site_path(site, ssh.key), tokens=True)}")
    known = _config_word(site_path(site, ssh.known_hosts), tokens=True)
    lines += [
        f"    UserKnownHostsFile {known}",
        f"    StrictHostKeyChecking {'accept-new' if ssh.trust_on_first_use else 'yes'}",
        f"    ConnectTimeout {max(1, round(ssh.connect_timeout))}",
    ]
    if jump:
        lines.append(f"    ProxyJump {jump}")
    return lines


def ssh_config(site: Site) -> str:
    """An ssh_config(5) for the export (``ssh -F``): a Host block for each node's address,
    each AIStor peer's and each jump host, each with the site's user, port, key, known_hosts and host-key
    policy. Why a file and not ``-o`` options: OpenSSH turns ProxyJump into an implicit
    ProxyCommand that passes the jump hop only ``-l -p -J -F -v`` (openssh-portable ssh.c,
    "Setting implicit ProxyCommand from ProxyJump"), so ``-o UserKnownHostsFile=`` or
    ``-i`` never reach the jump hop; a config given with -F does. The site's own
    ssh_config (``ssh.config``; ~/.ssh/config by default) is included last, so the
    site's values come first (ssh keeps the first value it obtains)."""
    blocks: list[list[str]] = []
    seen: set[str] = set()
    includes: list[str] = []
    # The GPU nodes (and their out-of-band addresses), then the AIStor peers: the
    # runbook's lines `on aistor-01` are run there (`ssh -F ansible/ssh_config PEER`).
    reached = [(node.ssh, (node.host, node.oob_host)) for node in site.nodes]
    reached += [(peer.ssh, (peer.host,)) for peer in site.aistor.peers]
    for ssh, addresses in reached:
        for host in dict.fromkeys(filter(None, addresses)):
            if host not in seen:
                seen.add(host)
                blocks.append(_block(site, host, ssh, user=ssh.user, port=ssh.port,
                                     jump=ssh.proxy_jump))  # fmt: skip
        if ssh.proxy_jump:
            jump_user, jump_host, jump_port = split_jump(ssh.proxy_jump)
            if jump_host not in seen:
                seen.add(jump_host)
                blocks.append(_block(site, jump_host, ssh, user=jump_user or ssh.user,
                                     port=jump_port, jump=None))  # fmt: skip
        include = "~/.ssh/config" if ssh.config is None else ssh.config
        if include != "none" and include not in includes:
            includes.append(include)
    text = "# gpu-node-wizard: how to reach the nodes of this site (ssh -F ssh_config).\n"
    text += "\n".join("\n".join(b) + "\n" for b in blocks)
    if includes:
        text += "\n# The site's own ssh_config, after the values above.\nMatch all\n"
        text += "".join(f"    Include {_config_word(site_path(site, i))}\n" for i in includes)
    return text


def remote_shell(node: Node) -> str:
    """The remote command that reads a script on stdin (``ssh ... CMD < script``): as root
    through ``sudo -n`` when the site's ssh.sudo says so (the wizard's own runs do the
    same), since a non-root shell cannot change DCB, links or configfs."""
    return "sudo -n sh -s" if node.ssh.use_sudo else "sh -s"


def quoted(argv: list[str]) -> str:
    return shlex.join(argv)
