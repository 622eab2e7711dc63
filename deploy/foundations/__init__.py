"""
What every layer stands on: the guard for text a node sent, the shell scripts and their
values, the TOML layout engine, credentials masked, the one Jinja environment, what one run
keeps, the command line of every tool, batch sizes.
"""
