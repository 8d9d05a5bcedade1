"""Textual screens, widgets and stylesheets: presentation only, over the engine."""
