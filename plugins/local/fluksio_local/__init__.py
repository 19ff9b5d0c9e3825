"""A Fluksio provisioner that starts workers as processes on the engine's host."""
