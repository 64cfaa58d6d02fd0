#!/usr/bin/env bash
# Turns an image the build made (NAME.tar, a flat rootfs tar, and NAME.json,
# its env/entrypoint/cmd) into an image in an OCI image layout directory, which
# skopeo, umoci and `docker load` (through skopeo) take as is:
#
#   oci-layout.sh [--tag T] [--platform OS/ARCH[/VARIANT]] [--extra-layer TAR]...
#                 NAME.tar NAME.json OUTDIR
#
#   --tag T            the image's name in OUTDIR's index.json
#                      (org.opencontainers.image.ref.name; default "latest"); an
#                      earlier image of that tag there is replaced
#   --platform P       the config's os/architecture[/variant] (default linux/amd64)
#   --extra-layer TAR  a layer on top of NAME.tar's (repeatable, bottom first):
#                      an uncompressed tar, taken as is and compressed, or one
#                      already gzipped (kept byte for byte). Images made from one
#                      NAME.tar share its layer blob.
#
# NAME.tar becomes one gzip layer without its device nodes and fifos (a
# registry's image carries none: the runtime makes /dev). OUTDIR is created
# when missing and may hold other images; prints the manifest's digest.
# Reproducible: gzip -n (no name, no time), the config's "created" is NAME.json's
# built_at and entries keep NAME.tar's mtimes, so a rerun gives the same digests.
# NAME.tar's compressed layer is remembered in OUTDIR/.source-layers by
# NAME.json's "digest" (NAME.tar's SHA-256): a second image on the same tar
# (another tag, an extra layer) does not compress it again; so is the diff_id
# of a gzipped extra layer, by its digest.
# Needs bash, jq, gzip, sha256sum and /usr/bin/python3 (stdlib).
set -euo pipefail

die() { echo "oci-layout: $*" >&2; exit 1; }
usage() { die "usage: oci-layout.sh [--tag T] [--platform OS/ARCH[/VARIANT]] [--extra-layer TAR]... NAME.tar NAME.json OUTDIR"; }

TAG=latest
PLATFORM=linux/amd64
EXTRA=()
while [ $# -gt 0 ]; do
  case $1 in
    --tag) [ $# -ge 2 ] || usage; TAG=$2; shift 2 ;;
    --platform) [ $# -ge 2 ] || usage; PLATFORM=$2; shift 2 ;;
    --extra-layer) [ $# -ge 2 ] || usage; EXTRA+=("$2"); shift 2 ;;
    --) shift; break ;;
    -*) usage ;;
    *) break ;;
  esac
done
[ $# -eq 3 ] || usage
TAR=$1 JSON=$2 OUT=$3
[ -f "$TAR" ] || die "$TAR: no such file"
[ -f "$JSON" ] || die "$JSON: no such file"
for f in "${EXTRA[@]}"; do [ -f "$f" ] || die "$f: no such file"; done
IFS=/ read -r OS ARCH VARIANT <<< "$PLATFORM"
[ -n "$OS" ] && [ -n "$ARCH" ] || die "--platform $PLATFORM: expected OS/ARCH[/VARIANT]"
[[ $TAG =~ ^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$ ]] || die "--tag $TAG: not a tag"

BLOBS=$OUT/blobs/sha256
mkdir -p "$BLOBS"
[ -f "$OUT/oci-layout" ] || printf '{"imageLayoutVersion":"1.0.0"}' > "$OUT/oci-layout"
TMP=$(mktemp -d "$OUT/.tmp.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# Copies a tar from stdin to stdout without its character and block devices
# and fifos; writes the SHA-256 of what it wrote (the layer's diff_id) to $1.
# shellcheck disable=SC2016
FILTER_PY='
import hashlib, sys, tarfile
class Hashing:
    def __init__(self, out):
        self.out, self.h = out, hashlib.sha256()
    def write(self, b):
        self.h.update(b)
        return self.out.write(b)
out = Hashing(sys.stdout.buffer)
dropped = 0
with tarfile.open(fileobj=sys.stdin.buffer, mode="r|", copybufsize=1 << 20) as src, \
     tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT, copybufsize=1 << 20) as dst:
    for m in src:
        if m.ischr() or m.isblk() or m.isfifo():
            dropped += 1
            continue
        dst.addfile(m, src.extractfile(m) if m.isreg() else None)
sys.stdout.buffer.flush()
with open(sys.argv[1], "w") as f:
    f.write("sha256:" + out.h.hexdigest())
if dropped:
    print(f"oci-layout: dropped {dropped} device nodes and fifos", file=sys.stderr)
'

sha() { sha256sum "$1" | cut -d' ' -f1; }
# put FILE: moves FILE into the blobs; prints "sha256:<hex> <size>".
put() {
  local hex size
  hex=$(sha "$1"); size=$(stat -c %s "$1")
  mv -f "$1" "$BLOBS/$hex"
  echo "sha256:$hex $size"
}

# NAME.tar's layer: "<diff_id> <digest> <size>", remembered by NAME.tar's digest.
SOURCE=$(jq -r '.digest // ""' "$JSON")
MEMO=$OUT/.source-layers
base_layer=""
if [ -n "$SOURCE" ] && [ -f "$MEMO" ]; then
  base_layer=$(awk -v s="$SOURCE" '$1 == s { print $2, $3, $4 }' "$MEMO" | tail -1)
  if [ -n "$base_layer" ]; then
    read -r _ d s <<< "$base_layer"
    [ "$(stat -c %s "$BLOBS/${d#sha256:}" 2>/dev/null)" = "$s" ] || base_layer=""
  fi
fi
if [ -z "$base_layer" ]; then
  echo "oci-layout: compressing $TAR ($(($(stat -c %s "$TAR") >> 20)) MiB, gzip -1)" >&2
  /usr/bin/python3 -c "$FILTER_PY" "$TMP/diff_id" < "$TAR" | gzip -1 -n > "$TMP/layer"
  base_layer="$(cat "$TMP/diff_id") $(put "$TMP/layer")"
  [ -z "$SOURCE" ] || echo "$SOURCE $base_layer" >> "$MEMO"
fi
LAYERS=("$base_layer")

for f in "${EXTRA[@]}"; do
  if [ "$(head -c2 "$f" | od -An -tx1 | tr -d ' \n')" = 1f8b ]; then
    # Its diff_id is remembered by its own digest: a bomb's takes a minute to hash.
    digest=sha256:$(sha "$f")
    diff_id=$(awk -v s="$digest" '$1 == s { print $2 }' "$MEMO" 2>/dev/null | tail -1)
    if [ -z "$diff_id" ]; then
      diff_id=sha256:$(gzip -dc "$f" | sha256sum | cut -d' ' -f1)
      echo "$digest $diff_id $digest $(stat -c %s "$f")" >> "$MEMO"
    fi
    cp "$f" "$TMP/layer"
  else
    diff_id=sha256:$(sha "$f")
    gzip -1 -n -c "$f" > "$TMP/layer"
  fi
  LAYERS+=("$diff_id $(put "$TMP/layer")")
done

layers_json=$(for l in "${LAYERS[@]}"; do echo "$l"; done |
  jq -Rc 'split(" ") | {diff_id: .[0], digest: .[1], size: (.[2] | tonumber)}' | jq -sc .)

jq -c --arg os "$OS" --arg arch "$ARCH" --arg variant "$VARIANT" --argjson layers "$layers_json" '
  {architecture: $arch, os: $os}
  + (if $variant != "" then {variant: $variant} else {} end)
  + (if .built_at then {created: .built_at} else {} end)
  + {config: {Env: (.env // []), Entrypoint: (.entrypoint // []), Cmd: (.cmd // [])},
     rootfs: {type: "layers", diff_ids: [$layers[].diff_id]}}' "$JSON" | tr -d '\n' > "$TMP/config"
read -r config_digest config_size <<< "$(put "$TMP/config")"

jq -nc --arg cd "$config_digest" --argjson cs "$config_size" --argjson layers "$layers_json" '
  {schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
   config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $cd, size: $cs},
   layers: [$layers[] | {mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest, size}]}' |
  tr -d '\n' > "$TMP/manifest"
read -r manifest_digest manifest_size <<< "$(put "$TMP/manifest")"

index='{"schemaVersion":2,"manifests":[]}'
[ ! -f "$OUT/index.json" ] || index=$(cat "$OUT/index.json")
jq -c --arg tag "$TAG" --arg d "$manifest_digest" --argjson s "$manifest_size" \
   --arg os "$OS" --arg arch "$ARCH" --arg variant "$VARIANT" '
  .manifests |= [.[] | select(.annotations["org.opencontainers.image.ref.name"] != $tag)]
  | .manifests += [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $d, size: $s,
                    platform: ({architecture: $arch, os: $os} + (if $variant != "" then {variant: $variant} else {} end)),
                    annotations: {"org.opencontainers.image.ref.name": $tag}}]' <<< "$index" > "$TMP/index.json"
mv -f "$TMP/index.json" "$OUT/index.json"
echo "$manifest_digest"
