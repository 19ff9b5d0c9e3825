"""Remote workers on the engine's side: the attach socket, sessions, and who is attached."""
