"""
The rack's fabric and the GPUs' partitions, pure (no host, no pyinfra operation): IMEX domains
(imex.py), GPUDirect RDMA's nvidia-peermem (peermem.py), MIG layouts applied at boot by NVIDIA's
mig-parted (mig.py); what their settings hold, parsed (values.py). docs/datacenter.md says what each does on a node.
"""
