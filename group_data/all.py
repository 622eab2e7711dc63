"""
Site settings for every host. pyinfra loads this file itself: it reads group_data/ beside the
inventory file and in the working directory (run from this checkout, or pass
`--group-data path/to/group_data` when you name hosts on the command line). Every key, its
default and what it allows: docs/settings.md. Set here only what your site changes; host data
in the inventory and `--data key=value` on the command line override it.
"""

# Which runtimes to wire to the NVIDIA runtime: "containerd", "docker" or both.
# container_runtimes = ["containerd"]

# Keep runc the default and use a RuntimeClass "nvidia" instead.
# nvidia_runtime_default = False

# Pin the driver branch (Ubuntu needs one) or an exact version.
# nvidia_driver_branch = "550"
# nvidia_driver_version = "550.127.05"

# An internal mirror of NVIDIA's container toolkit repository for air-gapped sites (it keeps
# NVIDIA's layout below this URL: deb/$(ARCH), rpm/$basearch).
# nvidia_toolkit_repo_url = "https://mirror.example.internal/libnvidia-container/stable"
# nvidia_toolkit_gpgkey_url = "https://mirror.example.internal/libnvidia-container/gpgkey"
