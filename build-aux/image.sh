#!/bin/bash
# nodeagent as an OCI image, built without a container daemon (`make image`):
#   build/image/nodeagent-VERSION.oci.tar   an OCI image layout as a tar (podman load, skopeo copy)
#   build/image/oci                         the same layout as a folder (umoci, skopeo oci:)
# Two layers, so that a new nodeagent ships only its own:
#   1. Debian's root file system (mmdebstrap --variant=essential: dpkg, coreutils, util-linux's
#      dmesg, dash) with python3 and its venv module; built once per SUITE, PACKAGES and mirror list
#      and kept in build/image/base-KEY.tar (keyed by those inputs: a new key builds again).
#   2. /opt/nodeagent, a venv made by the image's own python3 in a copy of layer 1, holding the
#      wheel of this tree and its dependencies' wheels (the default install: no TensorFlow),
#      downloaded here by pip for the image's CPython and glibc, installed there offline.
# umoci (https://github.com/opencontainers/umoci) writes the layout: the layers, the config (entry
# point, PATH) and the reference nodeagent:VERSION. Root only: mmdebstrap's root mode and the chroot that makes the
# venv need it. Usage: build-aux/image.sh VERSION PYTHON (PYTHON: a venv's python with pip).
set -euo pipefail

version=$1
host_python=$2
out=build/image
suite=${IMAGE_SUITE:-bookworm}
mirror=${IMAGE_MIRROR:-http://deb.debian.org/debian}
security=${IMAGE_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
packages=python3,python3-venv
# File times in the layers and the image's creation time: the same tree gives the same app layer
# (https://reproducible-builds.org/specs/source-date-epoch/).
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-315532800}
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

if [ "$(id -u)" != 0 ]; then
  echo "make image: needs root (mmdebstrap's root mode, chroot)" >&2
  exit 69
fi
for tool in mmdebstrap umoci chroot; do
  command -v "$tool" >/dev/null || { echo "make image: $tool not found (make system-packages)" >&2; exit 69; }
done

mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
start=$SECONDS
work=$out/work
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

sources=("deb $mirror $suite main" "deb $mirror $suite-updates main" "deb $security $suite-security main")
key=$(printf '%s\n' "v1" "$suite" "$packages" "$SOURCE_DATE_EPOCH" "${sources[@]}" | sha256sum | cut -c1-16)
base=$out/base-$key.tar
if [ -f "$base" ]; then
  echo "image: layer 1, Debian $suite with $packages: $base (cached)"
else
  echo "image: layer 1, Debian $suite with $packages: mmdebstrap (a minute or two)"
  # Documentation, man pages and locales are no use in the image.
  mmdebstrap --quiet --variant=essential --include="$packages" --format=tar \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$suite" "$base.part" "${sources[@]}" || exit 1
  mv "$base.part" "$base"
  find "$out" -maxdepth 1 -name 'base-*.tar' ! -name "base-$key.tar" -delete
fi

echo "image: layer 2, /opt/nodeagent: the wheels"
rootfs=$work/rootfs
mkdir -p "$rootfs"
tar -C "$rootfs" -xf "$base"
# The image's programs see the image's environment, not this shell's (PIP_*, a venv's PATH);
# SOURCE_DATE_EPOCH makes the bytecode pip compiles checked by hash, not by the install time.
in_image() { env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" chroot "$rootfs" "$@"; }
image_python=$(in_image /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
glibc=$(in_image /usr/bin/getconf GNU_LIBC_VERSION | sed 's/^glibc 2\.//')
arch=$(uname -m)
# pip does not widen a manylinux_2_X platform to the older ones: every glibc the image's runs.
platforms=(--platform "manylinux2014_$arch")
for ((minor = 17; minor <= glibc; minor++)); do platforms+=(--platform "manylinux_2_${minor}_$arch"); done
wheels=$work/wheels
"$host_python" -m pip wheel --quiet --no-deps --wheel-dir "$wheels" . >"$work/wheel.log" 2>&1 \
  || { tail -30 "$work/wheel.log" >&2; exit 1; }
"$host_python" -m pip download --quiet --dest "$wheels" --only-binary=:all: \
  --python-version "$image_python" --implementation cp "${platforms[@]}" "$wheels"/nodeagent-*.whl \
  >"$work/download.log" 2>&1 || { tail -30 "$work/download.log" >&2; exit 1; }

echo "image: layer 2, /opt/nodeagent: the venv (python $image_python, glibc 2.$glibc, $arch)"
mkdir -p "$rootfs/tmp/wheels"
cp "$wheels"/*.whl "$rootfs/tmp/wheels/"
in_image /usr/bin/python3 -m venv /opt/nodeagent
in_image /opt/nodeagent/bin/python -m pip install --quiet --no-index --no-cache-dir \
  --disable-pip-version-check --find-links /tmp/wheels nodeagent
in_image /opt/nodeagent/bin/nodeagent --version
# Layer 2 is the venv alone, in a stable order with fixed times and owners.
tar -C "$rootfs" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  -cf "$work/app.tar" opt/nodeagent

# The reference podman load and skopeo give the image: nodeagent:VERSION.
ref=nodeagent:$version
echo "image: the OCI layout, $ref"
layout=$work/oci
case $arch in
  x86_64) oci_arch=amd64 ;;
  aarch64) oci_arch=arm64 ;;
  *) oci_arch=$arch ;;
esac
umoci init --layout "$layout"
umoci new --image "$layout:$ref"
umoci raw add-layer --image "$layout:$ref" --history.created "$created" \
  --history.created_by "mmdebstrap --variant=essential --include=$packages $suite" "$base"
umoci raw add-layer --image "$layout:$ref" --history.created "$created" \
  --history.created_by "python3 -m venv /opt/nodeagent; pip install nodeagent $version" "$work/app.tar"
# PYTHONDONTWRITEBYTECODE: the venv's bytecode is compiled; a read-only root file system
# (the Kubernetes manifests') takes no more.
umoci config --image "$layout:$ref" --created "$created" --author nodeagent \
  --os linux --architecture "$oci_arch" \
  --config.entrypoint /opt/nodeagent/bin/nodeagent --config.cmd check \
  --config.env PATH=/opt/nodeagent/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env PYTHONDONTWRITEBYTECODE=1 --config.workingdir / \
  --config.label "org.opencontainers.image.title=nodeagent" \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.created=$created" \
  --history.created "$created" --history.created_by "umoci config"
umoci gc --layout "$layout"

rm -rf "$out/oci" "$out"/nodeagent-*.oci.tar
mv "$layout" "$out/oci"
tar -C "$out/oci" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  -cf "$out/nodeagent-$version.oci.tar.part" .
mv "$out/nodeagent-$version.oci.tar.part" "$out/nodeagent-$version.oci.tar"
echo "built $out/nodeagent-$version.oci.tar: $(du -m "$out/nodeagent-$version.oci.tar" | cut -f1) MB in $((SECONDS - start)) s"
