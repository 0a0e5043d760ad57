#!/usr/bin/env bash
# CI: build the Containerfile's CPU target with podman and run `clsbench run --suite quick` inside it, then check on
# the host that the result (and the container facts read inside) say "in a container" with the image's labels.
#
# No container registry can be reached from CI, so the base image is made here: a minimal Debian bookworm from the
# apt mirror this machine already uses (debootstrap), trusting the host's extra CA certificates (pip inside the build
# goes through the same TLS-inspecting egress as pip on the host), imported with `podman import`. torch and
# torchvision come from the host's local wheel store where pip is configured with one (mounted read-only into the
# build), else from PyPI.
#
# Skips (exit 0, one "container test SKIPPED: <reason>" line) where podman or debootstrap cannot be installed or
# run, or the disk is too small; fails where the image does not build, the run fails or the check fails.
# Environment: CLSBENCH_CONTAINER_TEST=0 skips it; CLSBENCH_CI_CACHE (default /var/cache/clsbench-ci) keeps the
# debootstrap downloads. The base image and the build's layers stay in podman's storage (about 6.5 GB) so that a
# later run on the same machine skips debootstrap and the torch layer.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
T0=$(date +%s)
LAST=$T0
phase() {  # phase NAME: prints how long the previous phase took, so the CI log shows where the time goes
    local now; now=$(date +%s)
    echo "container test: [$((now - T0)) s total, +$((now - LAST)) s] $*"
    LAST=$now
}
skip() { echo "container test SKIPPED: $*"; exit 0; }

[ "${CLSBENCH_CONTAINER_TEST:-1}" = 0 ] && skip "CLSBENCH_CONTAINER_TEST=0"
[ "$(uname -s)" = Linux ] || skip "not Linux ($(uname -s))"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || skip "needs root (debootstrap, rootful podman)"
    SUDO="sudo -n"
fi

SUITE=bookworm
INCLUDE=python3,python3-venv,ca-certificates  # what the CPU target needs from its base: python3 and its venv module
NEED_FREE_GIB=16  # the image is 6 GB (torch with its CUDA libraries), the build container holds as much again
# podman's default asks for nofile 1048576, above this machine's hard limit, and raising a limit is not permitted
# here: pass limits at or below the hard ones (nproc above 32768 was refused here even below the hard limit).
NOFILE=$(ulimit -Hn); [ "$NOFILE" = unlimited ] || [ "$NOFILE" -gt 65536 ] && NOFILE=65536
NPROC=4096  # threads of one user inside the container: the quick suite uses a few dozen
ULIMITS=(--ulimit "nofile=$NOFILE:$NOFILE" --ulimit "nproc=$NPROC:$NPROC")
# crun refuses this machine's hybrid cgroup layout; runc runs it.
RUNTIME=(--runtime runc)

# ---- tools
missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || skip "no apt-get to install ${missing[*]}"
    APT_LOG=$(mktemp)
    if ! { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            "${missing[@]}"; } >"$APT_LOG" 2>&1; then
        tail -n 5 "$APT_LOG"; rm -f "$APT_LOG"
        skip "could not install ${missing[*]} with apt-get (last lines above)"
    fi
    rm -f "$APT_LOG"
    phase "installed ${missing[*]}"
fi
PODMAN=($SUDO podman)
"${PODMAN[@]}" info >/dev/null 2>&1 || skip "podman is installed but \`podman info\` fails: $("${PODMAN[@]}" info 2>&1 | tail -n 1)"
STORE=$("${PODMAN[@]}" info --format '{{.Store.GraphRoot}}' 2>/dev/null || echo /var/lib/containers/storage)
mkdir -p "$STORE" 2>/dev/null || true
FREE_GIB=$(df -P -BG "$STORE" | awk 'NR==2 {sub("G", "", $4); print $4}')
[ "${FREE_GIB:-0}" -ge $NEED_FREE_GIB ] || skip "only ${FREE_GIB} GiB free under $STORE, the image needs $NEED_FREE_GIB"

# ---- the base: debootstrap from the configured mirror, the host's extra CAs, podman import; cached by its inputs
MIRROR=""
for f in /etc/apt/sources.list.d/*.sources; do  # deb822: the URIs of the stanza whose Suites name $SUITE
    [ -f "$f" ] || continue
    MIRROR=$(awk -v suite="$SUITE" 'BEGIN {RS=""} $0 ~ "Suites:[^\n]*[ \t]" suite "([ \t\n]|$)" {
        if (match($0, /URIs:[ \t]*[^ \t\n]+/)) { s = substr($0, RSTART, RLENGTH); sub(/URIs:[ \t]*/, "", s); print s; exit } }' "$f")
    [ -n "$MIRROR" ] && break
done
if [ -z "$MIRROR" ] && [ -f /etc/apt/sources.list ]; then
    MIRROR=$(awk -v suite="$SUITE" '$1 == "deb" && $3 == suite {print $2; exit}' /etc/apt/sources.list)
fi
MIRROR=${MIRROR:-http://deb.debian.org/debian}
CAS=(/usr/local/share/ca-certificates/*.crt)
[ -e "${CAS[0]}" ] || CAS=()
KEY=$( { echo "$SUITE $INCLUDE $MIRROR $(uname -m) recipe-1"; cat "${CAS[@]}" /dev/null; } | sha256sum | cut -c1-12)
BASE=localhost/clsbench-ci-base:$SUITE-$KEY
CACHE=${CLSBENCH_CI_CACHE:-/var/cache/clsbench-ci}
LAYERS=true  # a base made earlier may have the torch layer cached from an earlier build
if "${PODMAN[@]}" image exists "$BASE"; then
    phase "base $BASE already here (debootstrap of $SUITE from $MIRROR with the host's ${#CAS[@]} extra CAs)"
else
    $SUDO mkdir -p "$CACHE/debs"
    ROOTFS=$($SUDO mktemp -d "$CACHE/rootfs.XXXXXX")
    trap '$SUDO rm -rf "$ROOTFS"' EXIT
    LOG=$(mktemp)
    if ! $SUDO debootstrap --variant=minbase --include="$INCLUDE" --cache-dir="$CACHE/debs" "$SUITE" "$ROOTFS" \
            "$MIRROR" >"$LOG" 2>&1; then
        tail -n 5 "$LOG"; rm -f "$LOG"
        skip "debootstrap of $SUITE from $MIRROR failed (last lines above)"
    fi
    rm -f "$LOG"
    phase "debootstrap $SUITE from $MIRROR"
    if [ ${#CAS[@]} -gt 0 ]; then
        $SUDO cp "${CAS[@]}" "$ROOTFS/usr/local/share/ca-certificates/"
        $SUDO chroot "$ROOTFS" update-ca-certificates >/dev/null 2>&1  # (its rehash warns about the bundle itself)
    fi
    # As on the host: pip verifies TLS against the system bundle, which now holds the extra CAs.
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' | $SUDO tee "$ROOTFS/etc/pip.conf" >/dev/null
    $SUDO rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    $SUDO tar -C "$ROOTFS" -c . | "${PODMAN[@]}" import --quiet --message "debootstrap $SUITE from $MIRROR" - "$BASE" >/dev/null
    $SUDO rm -rf "$ROOTFS"; trap - EXIT
    phase "imported $BASE"
    # A new base has no cached layers: build without caching, one commit at the end instead of one per
    # instruction (about a minute less here: committing the 5.8 GB torch layer alone takes about 3 minutes).
    LAYERS=false
fi
"${PODMAN[@]}" run --rm "${RUNTIME[@]}" "${ULIMITS[@]}" "$BASE" python3 -c 'pass' >/dev/null 2>&1 ||
    skip "podman cannot run a container here: $("${PODMAN[@]}" run --rm "${RUNTIME[@]}" "${ULIMITS[@]}" "$BASE" true 2>&1 | tail -n 1)"

# ---- torch from the host's local wheel store where pip has one (the same paths mounted read-only into the build)
pipconf() {  # pipconf KEY: the host pip's setting from its files or PIP_* variables (`pip config get` misses some)
    python3 -m pip config list 2>/dev/null | sed -n "s/^\(global\|:env:\)\.$1='\(.*\)'\$/\2/p" || true
}
VOLUMES=()
PIP_OPTIONS=""
for url in $(pipconf extra-index-url); do
    case "$url" in
        file://*) dir=${url#file://}; dir=${dir%/simple}; dir=${dir%/}
                  [ -d "$dir" ] && VOLUMES+=(-v "$dir:$dir:ro") && PIP_OPTIONS+=" --extra-index-url $url" ;;
    esac
done
for dir in $(pipconf find-links | tr ' ' '\n' | sort -u); do
    [ -d "$dir" ] && VOLUMES+=(-v "$dir:$dir:ro") && PIP_OPTIONS+=" --find-links $dir"
done
# The torch/torchvision pair: the newest the host's pip is capped at (its local store holds exactly those), else
# a known pair. x86_64 PyPI wheels of torch are CUDA builds (5.5 GB installed); they run on the CPU, and no CPU
# build of torchvision is reachable here (PyTorch's own index is not), so the CPU image carries them.
TORCH="torch==2.14.1"; VISION="torchvision==0.29.1"
CONSTRAINTS=$(pipconf constraint | head -n 1)
if [ -f "$CONSTRAINTS" ]; then
    t=$(sed -n 's/^torch<=\([0-9.]*\)$/\1/p' "$CONSTRAINTS"); v=$(sed -n 's/^torchvision<=\([0-9.]*\)$/\1/p' "$CONSTRAINTS")
    [ -n "$t" ] && [ -n "$v" ] && TORCH="torch==$t" && VISION="torchvision==$v"
fi

# ---- build
COMMIT=$(git -C "$REPO" rev-parse HEAD)
VERSION=$(python3 -c 'import re, sys; print(re.search(r"^version = \"([^\"]+)\"", open("pyproject.toml").read(), re.M).group(1))')
IMAGE=localhost/clsbench:ci-cpu
BUILD_LOG=$(mktemp)
# With layers cached, torch is its own layer before the source is copied: a later run on the same machine and base
# rebuilds only clsbench's layer (about 20 s).
if ! "${PODMAN[@]}" build --layers=$LAYERS "${RUNTIME[@]}" "${ULIMITS[@]}" "${VOLUMES[@]}" \
        --build-arg CPU_BASE_IMAGE="$BASE" \
        --build-arg TORCH_INDEX_URL="${PIP_INDEX_URL:-https://pypi.org/simple}" \
        --build-arg TORCH_REQUIREMENT="$TORCH $VISION" \
        --build-arg PIP_OPTIONS="$PIP_OPTIONS" \
        --build-arg CLSBENCH_VERSION="$VERSION" --build-arg CLSBENCH_COMMIT="$COMMIT" \
        --target cpu -t "$IMAGE" -f Containerfile . >"$BUILD_LOG" 2>&1; then
    tail -n 40 "$BUILD_LOG"; rm -f "$BUILD_LOG"
    echo "container test FAILED: podman build of the cpu target (last lines above)"
    exit 1
fi
grep -E '^(torch |Successfully installed)' "$BUILD_LOG" | cut -c1-160 || true
rm -f "$BUILD_LOG"
phase "built $IMAGE ($("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.1f GB", $1 / 1e9}'))"

# ---- run: the quick suite in the container, its result written to a host folder mounted at /results
RESULTS=$(mktemp -d)
trap 'rm -rf "$RESULTS"' EXIT
chmod 0777 "$RESULTS"  # the image runs as its own non-root user
RUN=("${PODMAN[@]}" run --rm "${RUNTIME[@]}" "${ULIMITS[@]}" -v "$RESULTS:/results" -e "CLSBENCH_IMAGE=$IMAGE")
# What `clsbench env` shows of the container, without importing torch (the result file holds the full environment).
"${RUN[@]}" --entrypoint python "$IMAGE" -c 'import json
from clsbench.system.container import container_facts
from clsbench.system.container_text import container_lines
facts = container_facts()
json.dump(facts, open("/results/facts.json", "w"), indent=1)
for label, value in container_lines(facts):
    print(f"  {label:<15} {value}")'

# One repeat: this checks the container's plumbing, not the numbers (the suite's 3 repeats triple the time).
if ! "${RUN[@]}" "$IMAGE" run --suite quick --repeats 1 -q -o /results/quick.json; then
    echo "container test FAILED: clsbench run --suite quick inside the container"
    exit 1
fi
phase "ran the quick suite in the container"

python3 .ci/container_check.py "$RESULTS/quick.json" "$RESULTS/facts.json" --commit "$COMMIT" --version "$VERSION" \
    --image "$IMAGE" --base "$BASE" --runtime podman
phase "done"
