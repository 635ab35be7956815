#!/usr/bin/env bash
# The container images, built with no image registry (podman with runc;
# every podman call with CONTAINERS_CONF=deploy/podman/containers.conf):
#   localhost/steward-base:bookworm       Debian bookworm minbase made by mmdebstrap
#                                         from Debian's packages, `podman import`ed; the
#                                         rootfs tarball is cached in target/image/ and
#                                         remade only when its package list changes
#                                         (delete it to take newer Debian updates)
#   localhost/steward:<version>           a release tarball's folder in /opt/steward,
#                                         user 10001, the model fetched into the volume
#                                         /var/cache/steward at first start (deploy/Containerfile)
#   localhost/steward:<version>-smollm2   the same with the default model baked in under
#                                         /opt/steward/cache, original and q8_0
#                                         (deploy/Containerfile.smollm2)
# Usage: scripts/image.sh [--base-only | --no-model] [TARBALL]
#   TARBALL: a release tarball of scripts/release.sh (one folder
#   steward-<version>-linux-x86_64/ holding steward, steward-bench, ...).
#   Default: dist/steward-<version>-linux-x86_64-native.tar.gz, made with
#   `scripts/release.sh --native` when missing. The image's tag is the
#   tarball's version. The last line printed names the images built.
# The baked model comes from the host's cache (`steward fetch-model` with the
# tarball's binary: fetched there once when missing).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export CONTAINERS_CONF="$root/deploy/podman/containers.conf"
t0=$SECONDS
phase() { echo "== [$((SECONDS - t0)) s] $*"; }

base_only= model=1 tarball=
for a in "$@"; do
  case "$a" in
    --base-only) base_only=1 ;;
    --no-model) model= ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "image.sh: unknown option $a" >&2; exit 2 ;;
    *) tarball="$a" ;;
  esac
done
for tool in podman mmdebstrap runc; do
  command -v "$tool" >/dev/null || {
    echo "image.sh: $tool is missing (Debian: apt-get install -y podman mmdebstrap runc)" >&2
    exit 1
  }
done

# --- the base: Debian's packages only ---------------------------------------
# What the release binaries need beside glibc: the C++ runtime (libstdc++,
# libgcc_s), which scripts/release.sh leaves to the system; the tarballs ship
# their OpenMP runtime (libgomp, native; libomp, portable) and the Containerfile
# fails the build if ldd finds anything missing. CA certificates for the model
# fetch, and curl for the HEALTHCHECK (and podman kube play's liveness probe,
# which it runs as curl in the container): the binary has no probe subcommand.
packages="ca-certificates curl libgcc-s1 libstdc++6"
suite=bookworm
mirror="${STEWARD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security="${STEWARD_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}"
sources=("deb $mirror $suite main" "deb $mirror $suite-updates main" "deb $security $suite-security main")
# Leave out documentation and translations (copyright files stay).
dpkgopts=(path-exclude=/usr/share/doc/* path-include=/usr/share/doc/*/copyright
  path-exclude=/usr/share/man/* path-exclude=/usr/share/info/* path-exclude=/usr/share/locale/*)
base=localhost/steward-base:$suite
key="$(printf '%s\n' v1 "$suite" minbase "$packages" "${sources[@]}" "${dpkgopts[@]}" | sha256sum | cut -c1-16)"
mkdir -p target/image
rootfs="target/image/base-$suite-$key.tar"
if [ ! -s "$rootfs" ]; then
  phase "base rootfs: mmdebstrap $suite minbase + $packages -> $rootfs"
  args=(--variant=minbase --include="${packages// /,}" --aptopt='Acquire::Languages "none"')
  for o in "${dpkgopts[@]}"; do args+=(--dpkgopt="$o"); done
  partial="${rootfs%.tar}.partial-$$.tar"
  trap 'rm -rf "$partial"' EXIT
  mmdebstrap --quiet --format=tar "${args[@]}" "$suite" "$partial" "${sources[@]}"
  mv "$partial" "$rootfs"
  trap - EXIT
  # Older rootfs tarballs of other package lists are stale.
  find target/image -maxdepth 1 -name "base-$suite-*.tar" ! -name "*.partial-*" ! -name "${rootfs##*/}" -delete
fi
if [ "$(podman image inspect --format '{{index .Config.Labels "steward.base.key"}}' "$base" 2>/dev/null)" != "$key" ]; then
  phase "podman import $rootfs as $base"
  old_base="$(podman image inspect --format '{{.Id}}' "$base" 2>/dev/null || true)"
  podman import --quiet --change "LABEL steward.base.key=$key" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' "$rootfs" "$base" >/dev/null
  # The previous base, now untagged (kept while images built on it remain).
  [ -z "$old_base" ] || podman rmi "$old_base" >/dev/null 2>&1 || true
fi
phase "base: $base ($(podman image inspect --format '{{.Size}}' "$base" | awk '{printf "%.0f MB", $1 / 1e6}'))"
[ -z "$base_only" ] || { echo "images: $base"; exit 0; }

# --- the release tarball -----------------------------------------------------
if [ -z "$tarball" ]; then
  version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
  tarball="dist/steward-$version-linux-x86_64-native.tar.gz"
  if [ ! -s "$tarball" ]; then
    phase "no $tarball: scripts/release.sh --native"
    ./scripts/release.sh --native
  fi
fi
[ -s "$tarball" ] || { echo "image.sh: no release tarball $tarball" >&2; exit 1; }
if [ -s "$tarball.sha256" ]; then
  (cd "$(dirname "$tarball")" && sha256sum --quiet -c "$(basename "$tarball").sha256")
fi
top="$(tar -tzf "$tarball" | sed -n 1p)"
top="${top%%/*}"
case "$top" in
  steward-*-linux-x86_64) version="${top#steward-}"; version="${version%-linux-x86_64}" ;;
  *) echo "image.sh: $tarball holds $top/, not steward-<version>-linux-x86_64/" >&2; exit 1 ;;
esac
image=localhost/steward:$version

ctx="$(mktemp -d "$root/target/image/context.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
tar -xzf "$tarball" -C "$ctx"
mv "$ctx/$top" "$ctx/steward"
[ -x "$ctx/steward/steward" ] || { echo "image.sh: $tarball has no $top/steward" >&2; exit 1; }

phase "podman build $image (deploy/Containerfile, from $tarball)"
# The images the tags named before: removed below once untagged (and unused).
previous=("$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
  "$(podman image inspect --format '{{.Id}}' "$image-smollm2" 2>/dev/null || true)")
# --format docker: the OCI format has no HEALTHCHECK. --pull=never: nothing
# is fetched from a registry; the base is the one imported above.
podman build --format docker --pull=never -f deploy/Containerfile \
  --build-arg BASE="$base" --build-arg VERSION="$version" -t "$image" "$ctx"
built="$image"

if [ -n "$model" ]; then
  phase "the default model (steward fetch-model on this machine, cache ${STEWARD_CACHE_DIR:-default})"
  gguf="$("$ctx/steward/steward" fetch-model)"
  cp --reflink=auto "$gguf" "$ctx/"
  phase "podman build $image-smollm2 (deploy/Containerfile.smollm2)"
  podman build --format docker --pull=never -f deploy/Containerfile.smollm2 \
    --build-arg IMAGE="$image" --build-arg MODEL="$(basename "$gguf")" -t "$image-smollm2" "$ctx"
  built="$built $image-smollm2"
fi
for id in "${previous[@]}"; do
  [ -n "$id" ] || continue
  # Still tagged (nothing changed): kept; untagged: removed, unless in use.
  [ -z "$(podman image inspect --format '{{join .RepoTags ""}}' "$id" 2>/dev/null)" ] || continue
  podman rmi "$id" >/dev/null 2>&1 || true
done
for i in $built; do
  phase "built $i ($(podman image inspect --format '{{.Size}}' "$i" | awk '{printf "%.0f MB", $1 / 1e6}'))"
done
echo "images: $built"
