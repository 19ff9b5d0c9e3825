"""Pure scheduling: node requests matched against worker inventories (standard library only)."""
