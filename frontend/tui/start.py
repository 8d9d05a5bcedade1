"""The start screen: the site at a glance and, if a checkpoint exists, what it holds."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Header, Label, Static

from wizard.model import StepState
from wizard.site import Site
from wizard.status import Status


def site_summary(site: Site) -> str:
    nodes = "\n".join(
        f"  {n.name:<16} {n.host:<16} {n.os:<13} {n.gpu_count} x {n.gpu_model}  "
        f"{n.bond.name} = {' + '.join(n.bond.ports)}"
        for n in site.nodes
    )
    peers = ", ".join(f"{p.name} ({p.rdma_ip})" for p in site.aistor.peers) or "none"
    return (
        f"GPU nodes:\n{nodes}\n"
        f"AIStor peers: {peers}\n"
        f"Kubernetes {site.cluster.kubernetes_version}, GPU Operator {site.versions.gpu_operator} "
        f"(driver {site.versions.driver}, kernelModuleType {site.versions.kernel_module_type})\n"
        f"NIC profile {site.nic.profile}; RDMA resource {site.device_plugin.resource_name}; "
        f"QoS DSCP {site.qos.dscp} -> priority {site.qos.priority} -> TC{site.qos.traffic_class}"
    )


def checkpoint_summary(status: Status) -> str:
    if status.foreign is not None:
        return f"Refused: {status.foreign}"
    if not status.exists:
        return "No checkpoint yet: the run starts at phase 1."
    done = sum(1 for s in status.steps if s.state is StepState.DONE)
    skipped = [s for s in status.steps if s.state is StepState.SKIPPED]
    failed = [s for s in status.steps if s.state in (StepState.FAILED, StepState.BLOCKED)]
    lines = [
        f"Checkpoint from {status.updated}: {done} of {len(status.steps)} step runs done"
        + (f", {len(skipped)} skipped (kept on resume; `run --redo STEP@NODE`)" if skipped else "")
        + "."
    ]
    for cordon in status.cordoned:
        lines.append(f"CORDONED: {cordon.text()}")
        lines.append(f"  to uncordon: {cordon.remedy}")
    if status.cordoned:
        # Start over forgets results, never a cordon (Checkpoint.reset_all keeps it).
        lines.append(
            "  Start over keeps these nodes cordoned and named so, until a step of the new "
            "run uncordons them or you do (`kubectl uncordon NODE`)"
        )
    if status.interrupted:
        lines.append(
            "Interrupted (verified first on resume): "
            + ", ".join(f"{s.step} on {s.target}" for s in status.interrupted)
        )
    if failed:
        lines.append(
            "Failed or blocked: " + ", ".join(f"{s.step} on {s.target}" for s in failed[:6])
        )
    if status.changed_sections:
        lines.append("The site file changed: " + ", ".join(status.changed_sections))
        if status.would_reset:
            lines.append(
                "  these steps will be reset: "
                + ", ".join(f"{s} on {t}" for s, t in status.would_reset)
            )
    return "\n".join(lines)


class StartScreen(Screen[str]):
    """Returns ``resume``, ``restart`` or ``quit``."""

    AUTO_FOCUS = "#resume"

    BINDINGS = [
        Binding("enter", "choose('resume')", "Resume / start", show=False),
        Binding("q", "choose('quit')", "Quit"),
    ]

    def __init__(self, site: Site, status: Status) -> None:
        super().__init__()
        self.site = site
        self.status = status

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with VerticalScroll(id="start"):
            yield Label(f"Site {self.site.name}", classes="dialog-title")
            yield Static(site_summary(self.site), id="site-summary")
            yield Label("Checkpoint", classes="pane-title")
            yield Static(checkpoint_summary(self.status), id="checkpoint-summary")
            with Vertical(classes="buttons-column"), Horizontal(classes="buttons"):
                yield Button(
                    "Resume" if self.status.exists else "Start", id="resume", variant="primary"
                )
                if self.status.exists:
                    yield Button("Start over", id="restart")
                yield Button("Quit", id="quit")
        # A one-line key hint rather than Textual's Footer: this is the first screen an
        # operator sees, and the Footer's binding widgets cost a third of its paint time.
        yield Static(
            "[b]enter[/b] Resume / start   [b]q[/b] Quit   [b]ctrl+p[/b] commands",
            id="start-keys",
        )

    def on_mount(self) -> None:
        self.title = "gpu-node-wizard"
        self.sub_title = f"site {self.site.name}"

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.action_choose(event.button.id or "quit")

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)
