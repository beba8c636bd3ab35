#!/usr/bin/env bash
# `make docker-deps`: the container tests' real parts (as ../shared/recipes/docker-local.sh does it, checked on
# this kind of machine): Debian's docker.io (apt waits for the dpkg lock), a dockerd started by hand when none
# answers (no systemd needed; its log and pid in $CORRAL_DOCKER_DIR, default /tmp/corral-docker), and the local
# test image corral-test/busybox:1 built from busybox-static (nothing can be pulled from the internet). sudo only
# when not root. Prints a WARNING and exits 0 when a part cannot be had: the tests then skip loudly (fail in CI).
set -u
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
DIR=${CORRAL_DOCKER_DIR:-/tmp/corral-docker}
APT="-o DPkg::Lock::Timeout=600"
warn() { echo "WARNING: $*; the container tests will be skipped (under CI=true they fail)"; exit 0; }
need=()
command -v dockerd >/dev/null || [ -x /usr/sbin/dockerd ] || need+=(docker.io)
[ -x /bin/busybox ] || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
  { $SUDO apt-get $APT update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get $APT install -y -qq \
      --no-install-recommends "${need[@]}"; } >/dev/null || warn "could not install ${need[*]}"
fi
DOCKER=/usr/bin/docker  # Debian's client, matching its daemon (a newer static client may come first on PATH)
[ -x $DOCKER ] || DOCKER=docker
if ! $SUDO $DOCKER info >/dev/null 2>&1; then
  $SUDO mkdir -p "$DIR"
  $SUDO sh -c "setsid dockerd >'$DIR/dockerd.log' 2>&1 </dev/null & echo \$! >'$DIR/dockerd.pid'"
  for _ in $(seq 150); do $SUDO $DOCKER info >/dev/null 2>&1 && break; sleep 0.2; done
  $SUDO $DOCKER info >/dev/null 2>&1 || warn "dockerd did not start (see $DIR/dockerd.log)"
fi
if ! $SUDO $DOCKER image inspect corral-test/busybox:1 >/dev/null 2>&1; then
  R=$(mktemp -d); mkdir -p "$R/bin" "$R/tmp"; chmod 1777 "$R/tmp"; cp /bin/busybox "$R/bin/busybox"
  for c in sh echo sleep cat env ls true false printf date kill id wc head test; do ln -sf busybox "$R/bin/$c"; done
  tar -C "$R" -c . | $SUDO $DOCKER import - corral-test/busybox:1 >/dev/null || warn "could not build corral-test/busybox:1"
  rm -rf "$R"
fi
echo "docker-deps: engine $($SUDO $DOCKER version -f '{{.Server.Version}}'), image corral-test/busybox:1"
