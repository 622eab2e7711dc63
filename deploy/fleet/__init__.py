"""
The operator's tools over a fleet: the rollout in batches, the drift check, the fleet view of the
reports the nodes wrote (the console scripts of pyproject.toml's [project.scripts]).
"""
