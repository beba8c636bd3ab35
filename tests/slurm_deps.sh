#!/usr/bin/env bash
# `make slurm-deps`: the slurm pool tests' real parts, Debian's Slurm 22.05 (slurmctld, slurmd, the client tools),
# munge, and slurmrestd with its JWT auth plugin (the slurmrestd backend's tests), as ../shared/recipes/slurm-local.sh
# uses them (apt waits for the dpkg lock). The tests start their own throw-away cluster (tests/slurm_cluster.py).
# Prints a WARNING and exits 0 when they cannot be had: the tests then skip loudly (under CI=true they fail).
set -u
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
APT="-o DPkg::Lock::Timeout=600"
PACKAGES="slurmctld slurmd slurm-client munge slurmrestd slurm-wlm-jwt-plugin"
need=()
for tool in slurmctld slurmd sbatch munged slurmrestd; do
  command -v $tool >/dev/null || [ -x /usr/sbin/$tool ] || need+=($tool)
done
ls /usr/lib/*/slurm-wlm/auth_jwt.so >/dev/null 2>&1 || need+=(auth_jwt.so)
if [ ${#need[@]} -gt 0 ]; then
  { $SUDO apt-get $APT update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get $APT install -y -qq \
      --no-install-recommends $PACKAGES; } >/dev/null \
    || { echo "WARNING: could not install Slurm ($PACKAGES); the slurm pool tests will be skipped (under CI=true they fail)"; exit 0; }
fi
exit 0
