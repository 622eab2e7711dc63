"""
The NVIDIA driver on a node, pure: the kernel module type its GPUs need, the NVLink fabric, one
version for every package, its apt components, why an install failed, whether every kernel
has its module, and a reload without a reboot.
"""
