"""The report's sections on the cluster beyond the new nodes (#30): "Changes outside the new
nodes" (approved by name: who, when, pods restarted) and "Added for the new nodes" (new
objects, by name) say the same in report.md, report.xlsx and the TUI's report screen, all
rendered from one model (wizard/report_outside.py) over the checkpoint's fold."""

from __future__ import annotations

from textual.widgets import Static

from frontend.tui.report import ReportData, ReportScreen
from tests.test_tui import wait_for
from tests.test_tui_keys import PLAN, SITE, IdleApp
from wizard.approvals import Addition, Approval, ClusterChange
from wizard.report import markdown, report_of, write_report
from wizard.report_outside import ADDED_TITLE, CHANGES_TITLE, outside_sections
from wizard.runview import RunView

APPROVAL = Approval(
    change=ClusterChange.GPU_OPERATOR_UPGRADE,
    step="gpu-operator.install",
    target="cluster",
    by="ops@jump (--allow-cluster-change gpu-operator-upgrade)",
    at="2026-12-02T06:00:00+00:00",
    effect="upgrades the release",
    predicted=("gpu-operator/nvidia-dcgm-exporter-x1 on gpu-h100-01",),
    restarted=("gpu-operator/nvidia-dcgm-exporter-x1 on gpu-h100-01",),
    applied=True,
)
ADDITION = Addition(
    "DaemonSet kube-system/gnw-rdma-shared-dp-ds",
    "rdma-plugin.install",
    "cluster",
    "the new nodes' RDMA plugin",
    "2026-12-02T06:01:00+00:00",
)


def report():
    return report_of(RunView(PLAN, SITE, approvals=(APPROVAL,), additions=(ADDITION,)))


def test_report_md_and_the_workbook_show_the_same_sections(tmp_path):
    from openpyxl import load_workbook

    data = report()
    sections = outside_sections(data)
    assert [s.title for s in sections] == [CHANGES_TITLE, ADDED_TITLE]
    write_report(data, tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    book = load_workbook(tmp_path / "out" / "report.xlsx")
    for section in sections:
        assert f"## {section.title}" in text
        assert section.rows  # one approval, one addition
        sheet = book[section.title[:31]]
        rows = [tuple("" if c is None else str(c) for c in r) for r in sheet.iter_rows(values_only=True)]  # fmt: skip
        assert rows[0] == section.header
        assert rows[1:] == list(section.rows)
        for row in section.rows:
            assert "| " + " | ".join(row) + " |" in text
    assert "gpu-operator/nvidia-dcgm-exporter-x1 on gpu-h100-01" in text
    assert "DaemonSet kube-system/gnw-rdma-shared-dp-ds" in text


def test_an_empty_section_says_so_in_every_view(tmp_path):
    from openpyxl import load_workbook

    data = report_of(RunView(PLAN, SITE))
    write_report(data, tmp_path / "out")
    text = markdown(data)
    book = load_workbook(tmp_path / "out" / "report.xlsx")
    for section in outside_sections(data):
        assert not section.rows and section.intro in text
        assert book[section.title[:31]]["A1"].value == section.intro


async def test_the_tui_report_screen_shows_the_sections_of_report_md():
    data = report()
    app = IdleApp()
    async with app.run_test(size=(140, 45)) as pilot:
        screen = ReportScreen(ReportData(data, []), None)
        await app.push_screen(screen)
        await wait_for(pilot, lambda: screen.is_mounted, 5)
        await pilot.pause(0.1)
        shown = str(screen.query_one("#outside", Static).content)
    for section in outside_sections(data):
        for line in section.lines():
            assert line in shown
    assert "gpu-operator-upgrade" in shown and "ops@jump" in shown
    assert "DaemonSet kube-system/gnw-rdma-shared-dp-ds" in shown
