#!/usr/bin/env bash
# The container tests' real parts on Podman (issue 16), as tests/docker_deps.sh does them for Docker: Debian's podman
# (4.3) with what it needs here (runc, conmon, netavark, aardvark-dns, catatonit for the containers' init; apt waits
# for the dpkg lock), its Docker-compatible API service started rootful by hand when its socket does not answer (no
# systemd needed; its log and pid in $CORRAL_PODMAN_DIR, default /tmp/corral-podman), and the local test image
# corral-test/busybox:1 imported from busybox-static into Podman's store. Run the tests against it with
# CORRAL_DOCKER_HOST=unix://$CORRAL_PODMAN_SOCKET (default /run/podman/podman.sock). The private test registry is
# docker_deps.sh's (run that first for the registry tests): Podman is told it speaks plain HTTP.
# A drop-in /etc/containers/containers.conf.d/corral-test.conf fits Podman to a machine that is itself a container:
# runc on cgroup v1 (crun 1.8 refuses the hybrid v1 + v2 layout: "cgroups in hybrid mode not supported"), and
# default ulimits within this machine's hard limits (rootful Podman sets nofile to 1048576 for every container,
# which fails without CAP_SYS_RESOURCE: "setrlimit RLIMIT_NOFILE: Operation not permitted").
# Leaves dockerd, its images and containers alone. sudo only when not root. Prints a WARNING and exits 0 when a part
# cannot be had: the tests then skip loudly (fail in CI).
set -u
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
DIR=${CORRAL_PODMAN_DIR:-/tmp/corral-podman}
SOCK=${CORRAL_PODMAN_SOCKET:-/run/podman/podman.sock}
PORT=${CORRAL_TEST_REGISTRY_PORT:-5055}
APT="-o DPkg::Lock::Timeout=600"
warn() { echo "WARNING: $*; the container tests on Podman will be skipped (under CI=true they fail)"; exit 0; }
need=()
command -v podman >/dev/null || need+=(podman)
for b in runc conmon catatonit; do
  command -v $b >/dev/null || [ -x /usr/libexec/podman/$b ] || [ -x /usr/bin/$b ] || need+=($b)
done
[ -x /usr/lib/podman/netavark ] || need+=(netavark aardvark-dns)
command -v iptables >/dev/null || [ -x /usr/sbin/iptables ] || need+=(iptables)
[ -x /bin/busybox ] || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
  { $SUDO apt-get $APT update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get $APT install -y -qq \
      --no-install-recommends "${need[@]}"; } >/dev/null || warn "could not install ${need[*]}"
fi

# The drop-in (rewritten only when it changes: a running service reads it at start).
conf=""
if [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then conf+=$'[engine]\nruntime = "runc"\n'; fi
hn=$(ulimit -Hn); hu=$(ulimit -Hu)
if [ "$hn" != unlimited ] && [ "$hn" -lt 1048576 ]; then
  [ "$hu" = unlimited ] || [ "$hu" -gt 32768 ] && hu=32768  # what podman's own process runs with here
  conf+=$'[containers]\n'"default_ulimits = [\"nofile=$hn:$hn\", \"nproc=$hu:$hu\"]"$'\n'
fi
changed=0
CONF=/etc/containers/containers.conf.d/corral-test.conf
if [ -n "$conf" ] && [ "$(cat $CONF 2>/dev/null)" != "$(printf %s "$conf")" ]; then
  $SUDO mkdir -p "$(dirname $CONF)" && printf %s "$conf" | $SUDO tee $CONF >/dev/null || warn "could not write $CONF"
  changed=1
fi
REGCONF=/etc/containers/registries.conf.d/corral-test.conf
reg=$(printf '[[registry]]\nlocation = "127.0.0.1:%s"\ninsecure = true\n' "$PORT")
if [ "$(cat $REGCONF 2>/dev/null)" != "$reg" ]; then
  $SUDO mkdir -p "$(dirname $REGCONF)" && printf '%s\n' "$reg" | $SUDO tee $REGCONF >/dev/null || warn "could not write $REGCONF"
  changed=1
fi

ping() { [ "$($SUDO curl -s --max-time 5 --unix-socket "$SOCK" http://d/_ping 2>/dev/null)" = OK ]; }
if [ $changed = 1 ] && [ -f "$DIR/podman.pid" ] && $SUDO kill "$(cat "$DIR/podman.pid")" 2>/dev/null; then
  for _ in $(seq 50); do ping || break; sleep 0.1; done  # ours, started before the settings changed: restarted
fi
if ! ping; then
  $SUDO mkdir -p "$DIR" "$(dirname "$SOCK")"
  $SUDO sh -c "setsid podman system service --time=0 'unix://$SOCK' >'$DIR/podman.log' 2>&1 </dev/null & echo \$! >'$DIR/podman.pid'"
  for _ in $(seq 100); do ping && break; sleep 0.1; done
  ping || warn "the podman API service did not start (see $DIR/podman.log)"
fi
if ! $SUDO podman image exists corral-test/busybox:1 2>/dev/null; then
  R=$(mktemp -d); mkdir -p "$R/bin" "$R/tmp"; chmod 1777 "$R/tmp"; cp /bin/busybox "$R/bin/busybox"
  for c in sh echo sleep cat env ls true false printf date kill id wc head test; do ln -sf busybox "$R/bin/$c"; done
  tar -C "$R" -c . | $SUDO podman import - corral-test/busybox:1 >/dev/null 2>&1 || warn "could not import corral-test/busybox:1"
  rm -rf "$R"
fi
if ! out=$($SUDO podman run --rm --init corral-test/busybox:1 true 2>&1); then
  warn "podman cannot run a container here: $(echo "$out" | grep -v CNI | tail -1)"
fi
echo "podman-deps: engine podman $($SUDO podman version -f '{{.Server.Version}}' 2>/dev/null || podman --version), socket $SOCK, image corral-test/busybox:1"
echo "podman-deps: run the tests with CORRAL_DOCKER_HOST=unix://$SOCK"
