"""A session over the simulator: the demo's and ``lab``'s embedded lab (or the real control plane).

Kept apart from ``frontend.session`` so that the TUI and the CLI load the simulator only when
the operator asks for the demo or the lab (import contract ``tui-no-simulator``).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from frontend.session import Session
from simulator.lab import Lab
from simulator.scratch import scratch_dir
from wizard.services import build_services
from wizard.site import load_site


@dataclass
class LabSession(Session):
    lab: Lab | None = None
    _tmp: Path | None = field(default=None, repr=False)
    _keep_state: bool = field(default=False, repr=False)

    def keep_state(self) -> None:
        self._keep_state = True

    async def close(self) -> None:
        """Stop the lab. A temporary demo's state folder stays until ``discard``: the run
        is over, but the TUI that shows its report and measurements is still open."""
        await super().close()
        if self.lab is not None:
            await self.lab.stop()
        if self._tmp is not None:
            inside = self.temporary_state is not None
            shutil.rmtree(self._tmp / "lab" if inside else self._tmp, ignore_errors=True)

    @property
    def temporary_state(self) -> Path | None:
        """The temporary folder this demo's state lives in (None with ``--state-dir``)."""
        if self._tmp is None or not self.state_dir.is_relative_to(self._tmp):
            return None
        return self._tmp

    def discard(self) -> Path | None:
        """Remove the temporary folder once nothing reads it (the TUI has exited); after an
        internal error it stays for the journal. Returns the folder that stays, if any."""
        if self._tmp is None:
            return None
        if self._keep_state and self.state_dir.is_relative_to(self._tmp):
            return self._tmp
        shutil.rmtree(self._tmp, ignore_errors=True)
        return None


async def open_lab(
    faults: tuple[str, ...] = (),
    nodes: int = 1,
    state_dir: Path | None = None,
    *,
    keep: bool = False,
    control_plane: str = "embedded",
) -> LabSession:
    """Start the embedded lab in a temporary folder (the lab goes on close, the state folder
    with ``LabSession.discard``; after an internal error it stays, see Session.keep_state).

    ``keep`` (the demo with a state directory): the lab lives in ``state_dir/demo-lab``
    and comes back there with the same ports, keys, hosts and cluster when started again
    (simulator/persist.py), so a killed demo resumes exactly where it stopped.
    """
    if keep and state_dir is not None:
        directory = kept_lab_dir(state_dir)
        lab = Lab(directory, nodes=nodes, faults=faults, persist=True)
        await lab.start()
        site = load_site(lab.site_path)
        return LabSession(site, build_services(site), state_dir, lab=lab)
    tmp = scratch_dir("gnw-demo-")  # a killed demo's is swept (simulator/scratch.py)
    lab = Lab(tmp / "lab", nodes=nodes, faults=faults, control_plane=control_plane)
    await lab.start()
    site = load_site(lab.site_path)
    return LabSession(site, build_services(site), state_dir or tmp / "state", lab=lab, _tmp=tmp)


def kept_lab_dir(state_dir: Path) -> Path:
    """Where the demo keeps its lab inside a state directory (0700, like the state)."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    return state_dir / "demo-lab"
