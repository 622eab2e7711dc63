"""
What differs per distribution family, in one table: ``families`` (each family's package names,
repositories, commands and its package manager; ``detect_platform`` looks a host up), how each package
manager installs, pins, holds and lists (``package_managers``), and how a signed RPM repository is
added (``repositories``). Tasks say *what* (``install_packages``, ``add_repository``); the table says
*how*, instead of branching on distribution names.
"""
