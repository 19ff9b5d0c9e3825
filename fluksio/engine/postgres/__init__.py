"""The engine's state on PostgreSQL: the schema from SQLite's own migrations, the stores'
SQL run there, the lease that makes one engine of several active and the fence its writes
check, and the copy of an engine's SQLite state into it."""
