"""
The container runtimes' configs, pure (text and data in, text and data out, no host): ``api``
names what every runtime engine does, and ``containerd`` and ``docker`` each implement it.
"""
