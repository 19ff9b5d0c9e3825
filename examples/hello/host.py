"""Where and how this node ran: the machine, its Python, the thread cap it was given.

The flow binds it to the label "local", so it runs on the worker `make run` attaches.
"""

import os
import platform


def process():
    return {
        "host": platform.node(),
        "python": platform.python_version(),
        "threads": os.environ.get("OMP_NUM_THREADS"),
    }
