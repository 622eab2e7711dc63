"""
Verify's steps, pure, one module per subject: from what verify read on a node
(deploy/facts/verification.py), what it compares against (``options.VerifyOptions``, from the
settings) and the results of the runs it did (deploy/operations/probes.py), every step with its status and
one-line reason. No host, no commands: deploy/operations/verification.py reads, runs and records.

- ``gpu_driver``: the GPUs on the PCI bus, the kernel module, nvidia-smi, the driver's version, cuInit
- ``module_fabric``: the kernel module type, persistence, Fabric Manager
- ``toolkit_runtimes``: the toolkit, containerd's and Docker's wiring, the container runs
- ``cdi``: the CDI spec, the runtime's mode, the CRI probe's CDI device
- ``cluster``: the kubelet's cgroup driver, the /dev/char links
- ``steps``: every step in order, and the node's record
"""
