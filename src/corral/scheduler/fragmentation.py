"""GPU fragmentation of a node measured against a workload (Weng et al., ATC'23, section 4) (pure).

For a shape m, the fragment of node n is the free GPU capacity m cannot use: all of it when m cannot
run on n at all (wrong model, too little CPU, too few GPUs with room), otherwise the free capacity of
the GPUs with less room than one of m's GPUs needs. A node's fragmentation is the expectation over the
workload distribution. Memory is not part of the measure, as in the paper.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.scheduler.workload import WorkloadProfile


def compute_fragmentation(
    free_milli: Sequence[int], models: Sequence[str], cpu_left: int, profile: WorkloadProfile
) -> float:
    """Expected unusable free milli-GPU of one node. `free_milli[i]` is GPU i's free share, `models[i]`
    its model (healthy GPUs only)."""
    total = sum(free_milli)
    if total == 0:
        return 0.0
    single_model = len(set(models)) <= 1
    frag = 0.0
    for g in profile.groups:
        if single_model:
            if models and not g.accessible(models[0]):
                frag += g.prob * total
                continue
            usable = free_milli
        else:
            usable = [f for f, m in zip(free_milli, models) if g.accessible(m)]
        need = g.gpu_milli
        fitting = 0
        small = 0
        for f in usable:
            if f >= need:
                fitting += 1
            else:
                small += f
        if fitting < g.gpus:
            frag += g.prob * total
            continue
        p_fit = g.prob_cpu_fits(cpu_left)
        # Shapes whose CPU fits strand only the small GPUs (and other-model ones); the rest strand all.
        frag += p_fit * (small + total - sum(usable)) + (g.prob - p_fit) * total
    return frag
