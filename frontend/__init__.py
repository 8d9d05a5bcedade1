"""The application: the command line (``cli``), the TUI (``tui``), the headless runner and the demo.

These modules turn what an operator types into an engine run and show its state; they hold no
procedure knowledge of their own. The core (``wizard``, ``steps``) never imports them, and they
load the simulator (``simulator``) only when the operator asks for the demo or the lab.
"""
