"""The autoscaler (pure): what cloud pools should start and release. model.py (state and actions), demand.py
(which pending jobs a new node would serve, judged by the scheduler's engine), policy.py (the built-in decide),
reconciler.py (observed -> node changes). The loop that acts is server/background/autoscaler.py."""
