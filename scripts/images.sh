#!/usr/bin/env bash
# The compose stack's base image, for machines that cannot pull from a container registry.
#
# Every image in compose/ builds FROM "${BASE_IMAGE}" (compose/.env: debian:bookworm-slim, pulled from
# Docker Hub). Without a registry, this script makes an equivalent Debian 12 base from Debian's own
# packages (debootstrap --variant=minbase, the same apt sources as debian:bookworm-slim) and imports it
# as $STREAMFOLD_BASE_IMAGE (default streamfold/debian:bookworm). It does nothing if that image exists,
# so the ~1 minute of debootstrap runs once per machine (`docker rmi` it to make it again).
#
#   scripts/images.sh                        # make the base if missing, print its name
#   BASE_IMAGE=$(scripts/images.sh) docker-compose -f compose/docker-compose.yml build
#
# Needs root (debootstrap), debootstrap and a running Docker engine. DEBIAN_MIRROR picks the mirror
# (default: the first deb.debian.org-style URI of this host's apt sources, else deb.debian.org).
set -euo pipefail

say() { printf '\033[1m[images]\033[0m %s\n' "$*" >&2; }
die() { printf '[images] error: %s\n' "$*" >&2; exit 1; }

name=${STREAMFOLD_BASE_IMAGE:-streamfold/debian:bookworm}
suite=bookworm

if docker image inspect "$name" >/dev/null 2>&1; then
  say "base image $name exists (cached)"
  echo "$name"
  exit 0
fi

[ "$(id -u)" = 0 ] || die "debootstrap needs root (or pull debian:bookworm-slim and set BASE_IMAGE)"
command -v debootstrap >/dev/null || die "debootstrap is missing (apt-get install debootstrap)"

host_mirror() {  # the host's Debian archive URI, so the image uses the mirror this machine reaches
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
    | awk '/^(URIs:|deb) *[^ ]+\/debian\/?( |$)/ {print $2; exit}' || true
}
mirror=${DEBIAN_MIRROR:-$(host_mirror)}
mirror=${mirror:-http://deb.debian.org/debian}
mirror=${mirror%/}
security=${DEBIAN_SECURITY_MIRROR:-${mirror%/debian}/debian-security}

root=$(mktemp -d /tmp/streamfold-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
say "debootstrap --variant=minbase $suite from $mirror (about a minute)"
start=$(date +%s)
debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.log" 2>&1 \
  || { tail -n 20 "$root.log" >&2; rm -f "$root.log"; die "debootstrap failed"; }
rm -f "$root.log"

# What debian:bookworm-slim has: deb822 sources for the suite, its updates and security; no
# documentation or man pages installed; apt caches cleaned after every install.
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
cat >"$root/etc/dpkg/dpkg.cfg.d/docker" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
DPKG
cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
  "$root"/usr/share/info/* "$root"/var/log/*.log
# Files only: packages' maintainer scripts (OpenJDK's update-alternatives) expect the man directories.
find "$root"/usr/share/doc "$root"/usr/share/man -type f ! -name copyright -delete

tar --numeric-owner -C "$root" -c . \
  | docker import -c 'CMD ["bash"]' -c 'ENV LANG=C.UTF-8' \
      -m "debootstrap --variant=minbase $suite $mirror (scripts/images.sh)" - "$name" >/dev/null
say "made $name in $(( $(date +%s) - start )) s ($(docker image inspect -f '{{.Size}}' "$name" | awk '{printf "%.0f MB", $1/1e6}'))"
echo "$name"
