"""gpu-node's deploys (deploy/gpu_node.py, deploy/verify.py, deploy/k8s_gpu.py) and their parts."""

import os
import sys

# pyinfra's CLI turns bytecode writing off so that the files it executes leave no .pyc; this
# package's modules are ordinary imports, and compiling them again costs every run about 0.1 s of
# CPU. Unless the environment asks otherwise, they keep their bytecode as any import does.
if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
    sys.dont_write_bytecode = False
