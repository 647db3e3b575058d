#!/usr/bin/env bash
# make compose-test: docker-compose.yml for real, on a machine with no image registry.
#
# As root: installs Debian's docker.io, docker-compose, iptables and debootstrap; starts a
# private dockerd (its own socket and data root; bridge networks through Debian's
# iptables); builds a Debian base image with debootstrap + `docker import`; runs
# `docker-compose up` with that base (the containers on the compose network, the
# broker's EXTERNAL ports published on 127.0.0.1) until the Spark container prints its
# OK line; then removes the containers, images, volumes, networks, the daemon and its
# files. Nothing is pulled from a registry: the base image is built here, every other
# image from it. Ports: EOSBROKER_PORT (and the two after it, LAST_EXTERNAL_PORT) and
# EOSBROKER_ADMIN_PORT, free ones.
set -euo pipefail
# Debian's docker client and daemon, whatever else is on the PATH
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${COMPOSE_TEST_DIR:-$(mktemp -d /tmp/eosbroker-compose-test.XXXXXX)}
SUITE=${DEBIAN_SUITE:-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE=eosbroker-base:$SUITE
SOCK=$WORK/docker.sock
export DOCKER_HOST=unix://$SOCK
PROJECT=eosbroker-compose-test

log() { echo "compose-test: $*" >&2; }

free_port_block() {  # a free port P with P+1 and P+2 free too (the three nodes)
    python3 - <<'PY'
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p > 65000: continue
    try:
        held = []
        for q in (p, p + 1, p + 2):
            t = socket.socket(); t.bind(("127.0.0.1", q)); held.append(t)
        print(p); break
    except OSError:
        pass
    finally:
        for t in held: t.close()
PY
}

if [ "$(id -u)" != 0 ]; then
    echo "compose-test needs root (it installs packages and starts dockerd)" >&2
    exit 2
fi

DOCKERD_PID=
cleanup() {
    set +e
    if [ -S "$SOCK" ]; then
        (cd "$ROOT" && docker-compose -p "$PROJECT" down --volumes --rmi all --remove-orphans >/dev/null 2>&1)
        docker image rm -f "$BASE" >/dev/null 2>&1
    fi
    if [ -n "$DOCKERD_PID" ]; then
        kill "$DOCKERD_PID" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$DOCKERD_PID" 2>/dev/null
    fi
    # the default bridge this dockerd made (compose's own network went with `down`)
    [ "${had_docker0:-yes}" = no ] && ip link del docker0 2>/dev/null
    # whatever dockerd left mounted under the work directory (overlays, network namespaces)
    grep -o " $WORK[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
    rm -rf "$WORK"
}
trap cleanup EXIT

log "installing docker.io, docker-compose, iptables, debootstrap"
need=()
for cmd in dockerd:docker.io docker-compose:docker-compose iptables:iptables debootstrap:debootstrap; do
    command -v "${cmd%%:*}" >/dev/null 2>&1 || need+=("${cmd#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

log "starting dockerd in $WORK"
mkdir -p "$WORK/root" "$WORK/exec"
had_docker0=$(ip link show docker0 >/dev/null 2>&1 && echo yes || echo no)
dockerd --host "unix://$SOCK" --data-root "$WORK/root" --exec-root "$WORK/exec" --pidfile "$WORK/dockerd.pid" \
    --ip6tables=false >"$WORK/dockerd.log" 2>&1 &
DOCKERD_PID=$!
for _ in $(seq 1 150); do
    docker version >/dev/null 2>&1 && break
    kill -0 "$DOCKERD_PID" 2>/dev/null || { tail -20 "$WORK/dockerd.log" >&2; exit 1; }
    sleep 0.2
done
docker version >/dev/null

log "building the base image $BASE with debootstrap ($SUITE from $MIRROR)"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates "$SUITE" "$WORK/rootfs" "$MIRROR" \
    >"$WORK/debootstrap.log" 2>&1 || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
# Certificate authorities the host trusts beyond Debian's (a TLS-intercepting proxy in
# front of PyPI, say) are trusted by the builds too.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$WORK/rootfs/usr/local/share/ca-certificates/"
    chroot "$WORK/rootfs" update-ca-certificates >/dev/null
fi
tar -C "$WORK/rootfs" -c . | docker import \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' - "$BASE" >/dev/null
rm -rf "$WORK/rootfs"

port=$(free_port_block)
admin=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export BASE_IMAGE=$BASE EOSBROKER_PORT=$port LAST_EXTERNAL_PORT=$((port + 2)) EOSBROKER_ADMIN_PORT=$admin
log "docker-compose up (EXTERNAL on 127.0.0.1:$port-$((port + 2)), admin on $admin)"
cd "$ROOT"
docker-compose -p "$PROJECT" build --quiet
# up -d waits for the cluster to be healthy and the topics container to finish before it
# starts spark (depends_on conditions); then wait for spark's exit and read its output.
timeout "${COMPOSE_TEST_TIMEOUT:-1200}" docker-compose -p "$PROJECT" up -d --no-color
spark=$(docker-compose -p "$PROJECT" ps -q spark)
status=$(timeout "${COMPOSE_TEST_TIMEOUT:-1200}" docker wait "$spark")
docker-compose -p "$PROJECT" logs --no-color 2>&1 | tee "$WORK/compose.log" | tail -40
if [ "$status" != 0 ] || ! grep -q "spark.*| OK: " "$WORK/compose.log"; then
    log "FAILED (spark exited with $status): no OK line from the spark container"
    exit 1
fi
log "passed: $(grep -o 'OK: .*' "$WORK/compose.log" | head -1)"
