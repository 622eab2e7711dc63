"""
What a run reports: the node report, the fleet report and the run's exit status.
"""
