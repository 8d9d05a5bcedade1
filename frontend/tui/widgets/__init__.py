"""The TUI's widgets, one a file, each with its own CSS and messages (harlequin's and
posting's layout). None reads the checkpoint or the engine: each is fed the one fold of the
run (``wizard.runview.RunView``) or a part of it by the screen that composes it, and draws
that again when the fold has changed."""
