"""
The container runtimes' configs, pure (text and data in, text and data out, no host): ``engine``
names what every runtime engine does, and ``containerd`` and ``docker`` each implement it; ``cdi``
says what CDI each runtime gets, ``reverse_merge`` takes gpu-node's wiring back out of a config.
"""
