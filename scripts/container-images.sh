#!/usr/bin/env bash
# container-images.sh: podman and the images the container tests run calls in, built here
# from Debian's packages (no registry is reachable from the tests): two Debian releases
# with nothing but python3 (and coreutils: the benchmark's floor runs `true`), neither
# holding anything of Fluksio's.
#
#   localhost/fluksio-test/bookworm:1   Debian 12, Python 3.11
#   localhost/fluksio-test/trixie:1     Debian 13, Python 3.13
#   $DIR/bookworm.oci.tar               the first as an OCI archive, for a worker to pull
#                                       (oci-archive:$DIR/bookworm.oci.tar), any user may read
#
# Idempotent: installs what is missing (podman, runc, uidmap for rootless podman,
# mmdebstrap), builds only images that are not there. Run as root.
#   FLUKSIO_IMAGES_DIR   where the root file systems and the archive are kept
#                        [/var/lib/fluksio-images]
set -euo pipefail
DIR=${FLUKSIO_IMAGES_DIR:-/var/lib/fluksio-images}
CHECKOUT=$(cd "$(dirname "$0")/.." && pwd)
say() { printf '[container-images] %s\n' "$*" >&2; }
[ "$(id -u)" = 0 ] || { say "error: run as root"; exit 1; }

need=()
command -v podman >/dev/null || need+=(podman)
# Debian's default runtime for podman, crun, cannot start a container on the machines this
# was written on; runc can (given rlimits it may set: fluksio-worker finds those itself).
command -v runc >/dev/null || need+=(runc)
command -v newuidmap >/dev/null || need+=(uidmap)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    bash "$CHECKOUT/scripts/apt-install.sh" "${need[@]}"
fi

install -d -m 0755 "$DIR"
for release in bookworm trixie; do
    image=localhost/fluksio-test/$release:1
    podman image exists "$image" && continue
    if [ ! -s "$DIR/$release.tar" ]; then
        say "building $release with python3 (mmdebstrap)"
        mmdebstrap --quiet --format=tar --variant=extract --include=python3,base-files,coreutils "$release" \
            "$DIR/$release.tar.part"
        mv "$DIR/$release.tar.part" "$DIR/$release.tar"
    fi
    podman import --quiet "$DIR/$release.tar" "$image" >/dev/null
done
if [ ! -s "$DIR/bookworm.oci.tar" ]; then
    podman save --quiet --format oci-archive -o "$DIR/bookworm.oci.tar.part" \
        localhost/fluksio-test/bookworm:1
    mv "$DIR/bookworm.oci.tar.part" "$DIR/bookworm.oci.tar"
fi
chmod 0644 "$DIR/bookworm.oci.tar"
echo "IMAGES=localhost/fluksio-test/bookworm:1,localhost/fluksio-test/trixie:1"
echo "ARCHIVE=oci-archive:$DIR/bookworm.oci.tar"
