"""Sessions: where a run's site, transports and checkpoint come from (a site file, or the lab).

Front ends open a session, run the engine over it, and close it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from wizard.checkpoint import default_state_dir
from wizard.services import SiteServices, build_services
from wizard.site import Site, load_site


@dataclass
class Session:
    site: Site
    services: SiteServices
    state_dir: Path

    async def close(self) -> None:
        await self.services.close()

    def keep_state(self) -> None:
        """Keep the checkpoint and journal when the session closes (after an internal error,
        the journal is the evidence). A site's state directory is always kept."""


async def open_site(site_path: Path, state_dir: Path | None) -> Session:
    site = load_site(site_path)
    return Session(site, build_services(site), state_dir or default_state_dir())
