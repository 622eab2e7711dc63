"""
containerd wired to the NVIDIA runtime, from the bottom up: ``layout`` (the TOML layout engine),
``cri`` (what containerd's CRI plugin reads, the merge, the effective-config check) and
``flavours`` (the one table of plain, k3s, rke2, k0s, microk8s) are pure and sit below the facts;
``plan`` (over the main config and its imports) and ``operation`` (the @operation and the
candidate check) read the node.
"""
