"""Sample `dcgmi diag -j` documents in the shapes DCGM 4.x and 3.x print (see remediator/sidecar/dcgm.py)."""
