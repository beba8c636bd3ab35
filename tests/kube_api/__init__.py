"""A fake Kubernetes API server (with a fake scheduler and kubelet) for the kubernetes pool's tests."""
