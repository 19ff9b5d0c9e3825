"""Flows, runs and their execution: what a node is and how a run of a flow goes."""
