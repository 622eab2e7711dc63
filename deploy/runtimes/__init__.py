"""
The container runtimes, pure (text and data in, text and data out, no host): ``registry`` is the one
table of them, which verify, the CDI stage, the report and the settings iterate; ``engine`` names
what every runtime engine does with its config, and ``containerd`` and ``docker`` each implement it;
``cdi`` says what CDI each runtime gets, ``reverse_merge`` takes gpu-node's wiring back out of a config.
"""
