"""
Docker's engine: ``daemon_json`` (daemon.json read, wired, rendered, and what dockerd will run)
and ``unit`` (the flags docker.service passes to dockerd); ``verify`` (what verify reads of it and
checks, its row of the runtimes' table).
"""
