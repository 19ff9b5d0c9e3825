"""Provisioners: pluggy hooks and the built-in Slurm provisioner that add workers on demand."""
