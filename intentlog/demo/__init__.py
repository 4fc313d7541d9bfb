"""``intentlog demo``: the seed experiment, offline, with real processes and real kills."""
