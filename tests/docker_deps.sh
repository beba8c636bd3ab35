#!/usr/bin/env bash
# `make docker-deps`: the container tests' real parts (as ../shared/recipes/docker-local.sh does it, checked on
# this kind of machine): Debian's docker.io (apt waits for the dpkg lock), a dockerd started by hand when none
# answers (no systemd needed; its log and pid in $CORRAL_DOCKER_DIR, default /tmp/corral-docker), and the local
# test image corral-test/busybox:1 built from busybox-static (nothing can be pulled from the internet), and a
# private registry (Debian's docker-registry) on 127.0.0.1:$CORRAL_TEST_REGISTRY_PORT (default 5055) with password
# auth (alice / s3cret) holding team/busybox:1 and team/busybox:2 (two distinct images). sudo only when not root. Prints a WARNING and exits 0 when a part cannot be had: the tests then skip loudly (fail in CI).
set -u
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
DIR=${CORRAL_DOCKER_DIR:-/tmp/corral-docker}
APT="-o DPkg::Lock::Timeout=600"
warn() { echo "WARNING: $*; the container tests will be skipped (under CI=true they fail)"; exit 0; }
need=()
command -v dockerd >/dev/null || [ -x /usr/sbin/dockerd ] || need+=(docker.io)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v docker-registry >/dev/null || [ -x /usr/bin/docker-registry ] || need+=(docker-registry)
command -v htpasswd >/dev/null || need+=(apache2-utils)
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
# The private registry: password auth, two images only a login can pull.
PORT=${CORRAL_TEST_REGISTRY_PORT:-5055}
REG=127.0.0.1:$PORT
if ! curl -s -o /dev/null "http://$REG/v2/"; then
  $SUDO mkdir -p "$DIR/registry"
  $SUDO sh -c "htpasswd -Bbn alice s3cret > '$DIR/registry/htpasswd'" || warn "could not write the registry's htpasswd"
  $SUDO tee "$DIR/registry/config.yml" >/dev/null <<EOF
version: 0.1
storage:
  filesystem:
    rootdirectory: $DIR/registry/data
http:
  addr: $REG
auth:
  htpasswd:
    realm: corral-test
    path: $DIR/registry/htpasswd
EOF
  $SUDO sh -c "setsid docker-registry serve '$DIR/registry/config.yml' >'$DIR/registry.log' 2>&1 </dev/null & echo \$! >'$DIR/registry.pid'"
  for _ in $(seq 50); do curl -s -o /dev/null "http://$REG/v2/" && break; sleep 0.1; done
  curl -s -o /dev/null "http://$REG/v2/" || warn "the registry did not start (see $DIR/registry.log)"
fi
CFG=$(mktemp -d)  # a throw-away client config: the login is not left behind
if echo s3cret | $SUDO $DOCKER --config "$CFG" login "$REG" -u alice --password-stdin >/dev/null 2>&1; then
  for tag in 1 2; do
    if ! curl -s -f -o /dev/null -u alice:s3cret "http://$REG/v2/team/busybox/manifests/$tag"; then
      # images of their own (not another tag of the local test image): one more file each
      printf 'FROM corral-test/busybox:1\nRUN echo %s > /tag\n' "$tag" | $SUDO $DOCKER build -q -t "$REG/team/busybox:$tag" - \
        >/dev/null || warn "could not build $REG/team/busybox:$tag"
      $SUDO $DOCKER --config "$CFG" push "$REG/team/busybox:$tag" >/dev/null || warn "could not push to $REG"
      $SUDO $DOCKER rmi "$REG/team/busybox:$tag" >/dev/null 2>&1
    fi
  done
else
  warn "could not log in to the test registry $REG"
fi
rm -rf "$CFG"
echo "docker-deps: registry $REG (alice / s3cret): team/busybox:1, team/busybox:2"
echo "docker-deps: engine $($SUDO $DOCKER version -f '{{.Server.Version}}'), image corral-test/busybox:1"
