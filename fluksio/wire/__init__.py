"""The vocabulary on the wire: what a client sends and what the engine answers.

The request models (a flow and its nodes, a run, a secret, a token), the answer models,
the run and node states and where a call ran (provenance), each declared once, in one
package every side imports: the engine builds its answers with these models, the routes
read requests with them and the OpenAPI document is made from them, and a client (the
command line, the Python client, a script) writes and reads with the same ones. It imports
only the standard library, pydantic and the name rule (:mod:`fluksio.names`), so a client
has it without the server.
"""
