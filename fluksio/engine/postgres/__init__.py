"""The engine's state on PostgreSQL (issue 67, under way): the schema, from the same
migrations as SQLite's."""
