"""The simulated lab host (``LabHost``), a package so that its jobs can be split into
modules of their own; ``machine`` holds it for now."""

from wizard.lab.host.machine import LabHost, Port, Result

__all__ = ["LabHost", "Port", "Result"]
