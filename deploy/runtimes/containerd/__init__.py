"""
containerd's engine: ``cri`` (what containerd's CRI plugin reads, the merge, what containerd will
run) and ``installations`` (the one table of a plain containerd and the ones k3s, rke2, k0s and
microk8s bring); ``verify`` (what verify reads of it and checks, its row of the runtimes' table).
"""
