"""gpu-node's health check on the node (deploy/health/check.py), standard library only."""
