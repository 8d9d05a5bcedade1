"""Sessions: where a run's site, transports and checkpoint come from (a site file, or the lab).

Front ends open a session, run the engine over it, and close it.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from wizard.checkpoint import default_state_dir
from wizard.lab.lab import Lab
from wizard.services import SiteServices, build_services
from wizard.site import Site, load_site


@dataclass
class Session:
    site: Site
    services: SiteServices
    state_dir: Path

    async def close(self) -> None:
        await self.services.close()


async def open_site(site_path: Path, state_dir: Path | None) -> Session:
    site = load_site(site_path)
    return Session(site, build_services(site), state_dir or default_state_dir())


@dataclass
class LabSession(Session):
    lab: Lab | None = None
    _tmp: Path | None = field(default=None, repr=False)

    async def close(self) -> None:
        await super().close()
        if self.lab is not None:
            await self.lab.stop()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


async def open_lab(
    faults: tuple[str, ...] = (), nodes: int = 1, state_dir: Path | None = None
) -> LabSession:
    """Start the embedded lab in a temporary folder (removed on close)."""
    tmp = Path(tempfile.mkdtemp(prefix="gnw-demo-"))
    lab = Lab(tmp / "lab", nodes=nodes, faults=faults)
    await lab.start()
    site = load_site(lab.site_path)
    return LabSession(site, build_services(site), state_dir or tmp / "state", lab=lab, _tmp=tmp)
