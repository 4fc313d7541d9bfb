"""``intentlog demo``: the crash experiment, offline, with real processes and real kills."""
