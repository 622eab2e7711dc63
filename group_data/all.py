"""
Site settings for every host. Every key, its default and what it means are in
deploy/settings.py (and docs/settings.md); set here only what your site changes.
Host data in inventory.py and `--data key=value` on the command line override these.
"""

# Which runtimes to wire to the NVIDIA runtime: "containerd", "docker" or both.
# container_runtimes = ["containerd"]

# Keep runc the default and use a RuntimeClass "nvidia" instead.
# nvidia_runtime_default = False

# Pin the driver branch (Ubuntu needs one) or an exact version.
# nvidia_driver_branch = "550"
# nvidia_driver_version = "550.127.05"

# An internal mirror of NVIDIA's container toolkit repository for air-gapped sites.
# nvidia_toolkit_repo_url = "https://mirror.example.internal/libnvidia-container/stable/deb/$(ARCH)"
# nvidia_toolkit_gpgkey_url = "https://mirror.example.internal/libnvidia-container/gpgkey"
