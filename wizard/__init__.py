"""gpu-node-wizard: the engine, site model, facts, transports and artifacts.

Nothing in this package imports Textual: the TUI (``frontend.tui``), the headless CLI and
the tests are three front ends over the same engine.
"""

__version__ = "0.1.0"
