"""
The cluster side, pure: GPU sharing through Aliyun's gpushare scheduler extender, and GPUs through
Dynamic Resource Allocation.
"""
