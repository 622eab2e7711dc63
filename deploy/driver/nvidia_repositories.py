"""
NVIDIA's package repositories: where the container toolkit, the SUSE driver and CUDA (Fabric Manager,
the RHEL family's driver) come from, and the fingerprints their signing keys must have. The settings'
defaults (a mirror sets its own); the family table (deploy/distros/families.py) adds each family's path.
"""

# The base of NVIDIA's tree; the family adds "deb/$(ARCH)" or "rpm/$basearch" (a mirror keeps that layout).
NVIDIA_TOOLKIT_REPO_URL = "https://nvidia.github.io/libnvidia-container/stable"
NVIDIA_TOOLKIT_GPGKEY_URL = "https://nvidia.github.io/libnvidia-container/gpgkey"
# The base of NVIDIA's driver tree for SUSE; the family adds "opensuse/leap/<version>" and the like.
NVIDIA_DRIVER_REPO_URL = "https://download.nvidia.com"
# The base of NVIDIA's CUDA tree; the family adds "{dist}/{arch}".
NVIDIA_CUDA_REPO_URL = "https://developer.download.nvidia.com/compute/cuda/repos"
# The primary-key fingerprints of NVIDIA's repository keys, trusted only once the key served matches.
# The toolkit's (key id f796ecb0, which https://nvidia.github.io/libnvidia-container/ names): read with
# gpg from the key NVIDIA publishes at https://nvidia.github.io/libnvidia-container/gpgkey (NVIDIA's
# install guide, https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html,
# prints no fingerprint).
NVIDIA_TOOLKIT_KEY_FINGERPRINT = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
# The CUDA repository's: 3bf863cc (deb) and D42D0685 (rpm), as NVIDIA lists them at
# https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/gpg-keys-used-to-sign-the-packages.html,
# whole as NVIDIA prints them in https://github.com/NVIDIA/cuda-repo-management/blob/main/SIGNATURES.md
NVIDIA_CUDA_KEY_FINGERPRINTS = ("EB693B3035CD5710E231E123A4B469963BF863CC", "610C7B14E068A878070DA4E99CD0A493D42D0685")
