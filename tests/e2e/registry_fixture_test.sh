#!/usr/bin/env bash
# The tests' registries (tests/fixtures/registry.sh) hold what the other tests
# rely on, seen with curl as a registry client would: the authenticated one
# refuses anonymous and wrong credentials, both users get in, the index has two
# platforms, torch-plus shares torch's layer, bad/digest's layer does not hash
# to its digest.
#
#   registry_fixture_test.sh DIR    (DIR: registry.sh's, holding registry.env)
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: registry_fixture_test.sh DIR" >&2; exit 2; }
# shellcheck disable=SC1091
source "$1/registry.env"
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

MANIFEST_TYPES="application/vnd.oci.image.manifest.v1+json,application/vnd.oci.image.index.v1+json"
MANIFEST_TYPES+=",application/vnd.docker.distribution.manifest.v2+json,application/vnd.docker.distribution.manifest.list.v2+json"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# auth_get PATH [CURL ARGS...]: GET https://AUTH/v2/PATH; the body in
# $TMP/body, the headers in $TMP/headers; prints the HTTP status.
auth_get() {
  local path=$1; shift
  curl -s -m 30 --cacert "$RM_REGISTRY_CA" -H "Accept: $MANIFEST_TYPES" -D "$TMP/headers" -o "$TMP/body" \
    -w '%{http_code}' "$@" "https://$RM_REGISTRY_AUTH/v2/$path"
}
lab() { auth_get "$1" -u "$RM_REGISTRY_USER:$RM_REGISTRY_PASSWORD"; }
body_digest() { echo "sha256:$(sha256sum "$TMP/body" | cut -d' ' -f1)"; }

code=$(lab lab/torch/manifests/v1)
[ "$code" = 200 ] || fail "lab/torch:v1 with lab's credentials: HTTP $code: $(cat "$TMP/body")"
[ "$(body_digest)" = "$RM_DIGEST_TORCH" ] || fail "lab/torch:v1 is $(body_digest), registry.env says $RM_DIGEST_TORCH"
grep -qi "^docker-content-digest: $RM_DIGEST_TORCH" "$TMP/headers" || fail "no Docker-Content-Digest $RM_DIGEST_TORCH"
torch_layer=$(jq -r '.layers[0].digest' "$TMP/body")
pass "lab/torch:v1 is $RM_DIGEST_TORCH over TLS with the fixture's CA"

code=$(auth_get lab/torch/manifests/v1)
[ "$code" = 401 ] || fail "lab/torch:v1 without credentials: HTTP $code, expected 401"
grep -qi '^www-authenticate: basic' "$TMP/headers" || fail "a 401 without a Basic challenge: $(cat "$TMP/headers")"
code=$(auth_get lab/torch/manifests/v1 -u "$RM_REGISTRY_USER:wrong-$RM_REGISTRY_PASSWORD")
[ "$code" = 401 ] || fail "lab/torch:v1 with a wrong password: HTTP $code, expected 401"
code=$(auth_get lab/torch/manifests/v1 -u "$RM_REGISTRY_OTHER_USER:$RM_REGISTRY_OTHER_PASSWORD")
[ "$code" = 200 ] || fail "lab/torch:v1 as $RM_REGISTRY_OTHER_USER: HTTP $code"
pass "no credentials and a wrong password get 401; both users get in"

code=$(lab lab/multi/manifests/v1)
[ "$code" = 200 ] || fail "lab/multi:v1: HTTP $code"
[ "$(body_digest)" = "$RM_DIGEST_MULTI" ] || fail "lab/multi:v1 is $(body_digest), registry.env says $RM_DIGEST_MULTI"
platforms=$(jq -r '[.manifests[] | .platform.os + "/" + .platform.architecture] | sort | join(" ")' "$TMP/body")
[ "$platforms" = "linux/amd64 linux/arm64" ] || fail "lab/multi:v1's platforms: '$platforms'"
[ "$(jq -r '.manifests[] | select(.platform.architecture == "arm64") | .digest' "$TMP/body")" = "$RM_DIGEST_MULTI_ARM64" ] ||
  fail "lab/multi:v1's arm64 manifest is not $RM_DIGEST_MULTI_ARM64"
pass "lab/multi:v1 is an index of $platforms"

code=$(lab lab/torch-plus/manifests/v1)
[ "$code" = 200 ] || fail "lab/torch-plus:v1: HTTP $code"
[ "$(jq -r '.layers | length' "$TMP/body")" = 2 ] || fail "lab/torch-plus:v1 does not have two layers"
[ "$(jq -r '.layers[0].digest' "$TMP/body")" = "$torch_layer" ] || fail "lab/torch-plus:v1 does not share torch's layer $torch_layer"
[ "$torch_layer" = "$RM_LAYER_TORCH" ] || fail "torch's layer is $torch_layer, registry.env says $RM_LAYER_TORCH"
pass "lab/torch-plus:v1 shares torch's layer $torch_layer"

code=$(curl -s -m 30 -o "$TMP/body" -w '%{http_code}' "http://$RM_REGISTRY_ANON/v2/bad/digest/blobs/$RM_LAYER_BAD_DIGEST")
[ "$code" = 200 ] || fail "bad/digest's layer on the anonymous registry: HTTP $code"
[ "$(body_digest)" != "$RM_LAYER_BAD_DIGEST" ] || fail "bad/digest's layer hashes to its digest: the fixture did not replace it"
gzip -t "$TMP/body" || fail "bad/digest's replaced layer is not a valid gzip"
pass "bad/digest's layer is served with other bytes than its digest's"
