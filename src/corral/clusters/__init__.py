"""Existing clusters Corral fronts as pools (Slurm, Kubernetes): the protocol (base.py) and one backend each."""
