"""
The settings' sections, one module each: each section is a heading of docs/settings.md (its
docstring), its settings declared with their types, defaults and descriptions, and the rules of how
they combine with the others declared on it, as pydantic validators. ``deploy/settings/model.py``
joins them into ``Settings``.
"""
