"""
What a run decides before it changes anything, from the settings, the family table and what
preflight read: preflight's findings, the driver stage's plan and its names. No host.
"""
