"""One rule for an installed package (issue 24 review S3): the wizard's parser and the
Ansible play read `dpkg-query -W` alike, and a package an apt run left half-way, or
removed with its conffiles kept, is missing to both."""

from __future__ import annotations

import re

import yaml

from steps import build_plan
from steps.packages import install_argv, installed_line, query_argv
from tests.test_ansible import FLEET
from wizard.export import export
from wizard.facts.host import parse_packages
from wizard.site import load_site

DPKG = (
    "rdma-core install ok installed\n"
    "ibverbs-utils hold ok installed\n"
    "perftest install ok half-configured\n"
    "infiniband-diags install ok unpacked\n"
    "libibverbs1 install reinstreq half-installed\n"
    "ibverbs-providers deinstall ok config-files\n"
    "linux-headers-6.8.0-40-generic unknown ok not-installed\n"
)
INSTALLED = {"rdma-core", "ibverbs-utils"}


def test_the_parser_counts_only_a_fully_installed_package_as_installed():
    found = parse_packages(DPKG)
    assert set(found.installed) == INSTALLED
    assert set(found.missing) == {line.split()[0] for line in DPKG.splitlines()} - INSTALLED


def test_the_play_reads_with_the_parsers_own_rule(tmp_path):
    """The play's `reject('match', gnw_packages_installed)` is Python's re.match on each
    line, with the regex the parser uses: the same lines are missing to both."""
    site_file = tmp_path / "site.yaml"
    site_file.write_text(FLEET)  # gpu-2 runs Ubuntu 24.04
    export(load_site(site_file), build_plan(), tmp_path / "out")
    host_vars = yaml.safe_load((tmp_path / "out/ansible/host_vars/gpu-2.yml").read_text())
    rule = host_vars["gnw_packages_installed"]
    assert rule == installed_line("ubuntu-24.04")
    play_missing = {line.split()[0] for line in DPKG.splitlines() if not re.match(rule, line)}
    assert play_missing == set(parse_packages(DPKG).missing)
    # The query and the install are the step's own, the install non-interactive.
    assert host_vars["gnw_packages_query"][0] == query_argv("ubuntu-24.04", [])[0]
    install = host_vars["gnw_packages_install"]
    assert install[: len(install_argv("ubuntu-24.04", []))] == install_argv("ubuntu-24.04", [])
    assert "DEBIAN_FRONTEND=noninteractive" in install and "DPkg::Lock::Timeout=300" in install
    assert "Dpkg::Options::=--force-confold" in install
