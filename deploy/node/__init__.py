"""
gpu-node on the node itself: the first-boot unit, pull mode (its settings and units), an image
bake, the records an undo reads, and the files root reads with no operator watching.
"""
