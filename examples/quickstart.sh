#!/usr/bin/env bash
# tagpin quickstart: one command, everything local, no cloud, no docker.
#
#   bash examples/quickstart.sh
#
# 1. starts a registry on 127.0.0.1:5000 (Debian's docker-registry; data in a temp dir),
# 2. pushes a tiny image sample/web:1.0 with the OCI push API, using only curl and sha256sum,
# 3. makes a bare Git repository from examples/gitops (copied to a temp dir first; nothing in
#    examples/ is written),
# 4. pass 1: `tagpin sync` commits the digest of sample/web:1.0,
# 5. pushes sample/web:1.0 again with different content (the tag moves),
# 6. pass 2: `tagpin sync` commits a one-line change to the new digest,
# 7. pass 3: `tagpin sync` finds nothing to pin and commits nothing.
#
# It is also a test: it checks each result and exits non-zero if one is not as expected.
#
# Environment:
#   TAGPIN            the tagpin binary (default: target/release/tagpin, else target/debug/tagpin,
#                     else it runs `cargo build --release`)
#   QUICKSTART_PORT   registry port on 127.0.0.1 (default 5000)
#   QUICKSTART_KEEP=1 keep the temp dir (registry data, Git repositories) for a look afterwards
#   REGISTRY_BIN      the registry binary (default /usr/bin/docker-registry)

set -Eeuo pipefail
# Any command failing unexpectedly stops the quickstart with its line number.
trap 'fail "unexpected error at line $LINENO: $BASH_COMMAND"' ERR

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${QUICKSTART_PORT:-5000}"
REGISTRY_HOST="127.0.0.1:$PORT"
REGISTRY="http://$REGISTRY_HOST"
REGISTRY_BIN="${REGISTRY_BIN:-/usr/bin/docker-registry}"
IMAGE_REPO="sample/web"
TAG="1.0"
OVERLAY="overlays/production/kustomization.yaml"

step() { printf '\n==> %s\n' "$*"; }
ok() { printf '    ok: %s\n' "$*"; }
fail() {
  printf '\nquickstart: FAILED: %s\n' "$*" >&2
  exit 1
}
indent() { sed 's/^/    /'; }

# --- Tools -------------------------------------------------------------------------------------
for tool in curl sha256sum git tar gzip timeout; do
  command -v "$tool" >/dev/null 2>&1 || fail "'$tool' is not installed"
done
if [ ! -x "$REGISTRY_BIN" ]; then
  fail "$REGISTRY_BIN not found. Install it with: sudo apt-get install docker-registry
  (or set REGISTRY_BIN to a CNCF distribution 'registry' binary; it takes the same 'serve CONFIG')"
fi

if [ -n "${TAGPIN:-}" ]; then
  [ -x "$TAGPIN" ] || fail "TAGPIN=$TAGPIN is not an executable file"
else
  target_dir="${CARGO_TARGET_DIR:-$ROOT/target}"
  for candidate in "$target_dir/release/tagpin" "$target_dir/debug/tagpin"; do
    if [ -x "$candidate" ]; then
      TAGPIN="$candidate"
      break
    fi
  done
  if [ -z "${TAGPIN:-}" ]; then
    echo "No tagpin binary found; building it: (cd $ROOT && cargo build --release)"
    echo "(a first build takes a few minutes)"
    (cd "$ROOT" && cargo build --release)
    TAGPIN="$target_dir/release/tagpin"
  fi
fi
echo "tagpin binary: $TAGPIN"

# --- Temp dir and cleanup ----------------------------------------------------------------------
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tagpin-quickstart.XXXXXX")"
REGISTRY_PID=""
cleanup() {
  if [ -n "$REGISTRY_PID" ]; then
    kill "$REGISTRY_PID" 2>/dev/null || true
    wait "$REGISTRY_PID" 2>/dev/null || true
  fi
  if [ "${QUICKSTART_KEEP:-}" = 1 ]; then
    echo "kept: $TMP"
  else
    rm -rf "$TMP"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM # so that cleanup runs on Ctrl-C and kill too

BARE="$TMP/gitops.git" # the "remote" GitOps repository tagpin pushes to
WORK="$TMP/work"       # the checkout the sample tree is committed from
# Keep the user's own configuration out of this run: no global git config (signing, hooks),
# no registry credentials from ~/.docker.
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export DOCKER_CONFIG="$TMP/docker"
mkdir -p "$DOCKER_CONFIG"

# Every curl: quiet but show errors, fail on HTTP errors, never hang.
http() { curl -sS --fail --max-time 30 "$@"; }

# The commit count of main in the bare repository.
commits() { git --git-dir="$BARE" rev-list --count main; }

# ===============================================================================================
step "1. Start a local registry on $REGISTRY_HOST"
# ===============================================================================================
# A random id in a response header proves that whoever answers on the port is our registry.
REGISTRY_ID="quickstart-$$-$RANDOM"
cat >"$TMP/registry.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $TMP/registry-data
http:
  addr: $REGISTRY_HOST
  secret: $REGISTRY_ID
  headers:
    X-Quickstart-Registry-Id: [$REGISTRY_ID]
EOF
echo "$REGISTRY_BIN serve $TMP/registry.yml"
"$REGISTRY_BIN" serve "$TMP/registry.yml" >"$TMP/registry.log" 2>&1 &
REGISTRY_PID=$!

# Wait (at most 20 s) until GET /v2/ answers with our id.
up=""
for _ in $(seq 1 100); do
  if ! kill -0 "$REGISTRY_PID" 2>/dev/null; then
    break # it exited, most likely because the port is taken
  fi
  if curl -s --max-time 2 -o /dev/null -D - "$REGISTRY/v2/" 2>/dev/null |
    grep -qi "^X-Quickstart-Registry-Id: $REGISTRY_ID"; then
    up=yes
    break
  fi
  sleep 0.2
done
if [ -z "$up" ]; then
  indent <"$TMP/registry.log" >&2
  fail "the registry did not start on $REGISTRY_HOST (port taken? set QUICKSTART_PORT to a free port)"
fi
ok "registry is up (pid $REGISTRY_PID, storage $TMP/registry-data)"

# push_blob FILE: uploads FILE as a blob of $IMAGE_REPO, monolithically: POST opens an upload
# session and answers with its Location; one PUT to it with ?digest= sends the bytes and
# commits the blob. Sets BLOB_DIGEST and BLOB_SIZE.
push_blob() {
  local file=$1 location separator
  BLOB_DIGEST="sha256:$(sha256sum "$file" | cut -d' ' -f1)"
  BLOB_SIZE=$(($(wc -c <"$file")))
  location=$(http -X POST -o /dev/null -D - "$REGISTRY/v2/$IMAGE_REPO/blobs/uploads/" |
    tr -d '\r' | sed -n 's/^[Ll]ocation: //p')
  [ -n "$location" ] || fail "POST /v2/$IMAGE_REPO/blobs/uploads/ gave no Location"
  case "$location" in /*) location="$REGISTRY$location" ;; esac # may be relative
  case "$location" in *\?*) separator='&' ;; *) separator='?' ;; esac
  http -X PUT -o /dev/null -H 'Content-Type: application/octet-stream' \
    --data-binary "@$file" "$location${separator}digest=$BLOB_DIGEST"
  echo "    blob $BLOB_DIGEST ($BLOB_SIZE bytes)"
}

# push_image NAME TEXT: builds a one-layer image whose only file says TEXT, pushes its layer,
# its config and an OCI image manifest as $IMAGE_REPO:$TAG. Sets IMAGE_DIGEST, the manifest
# digest, after checking the registry's Docker-Content-Digest agrees with our sha256.
push_image() {
  local dir="$TMP/image-$1" text=$2 diff_id layer_digest layer_size config_digest config_size
  local served
  mkdir -p "$dir/rootfs"
  printf '%s\n' "$text" >"$dir/rootfs/hello.txt"
  # The layer: a gzipped tar. Its diff_id (in the config) is the sha256 of the plain tar.
  tar -C "$dir/rootfs" -cf "$dir/layer.tar" hello.txt
  diff_id="sha256:$(sha256sum "$dir/layer.tar" | cut -d' ' -f1)"
  gzip -n -c "$dir/layer.tar" >"$dir/layer.tar.gz"
  push_blob "$dir/layer.tar.gz"
  layer_digest=$BLOB_DIGEST layer_size=$BLOB_SIZE
  # The image config.
  printf '{"architecture":"amd64","os":"linux","config":{"Cmd":["cat","/hello.txt"]},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
    "$diff_id" >"$dir/config.json"
  push_blob "$dir/config.json"
  config_digest=$BLOB_DIGEST config_size=$BLOB_SIZE
  # The manifest ties them together; PUT under the tag moves the tag to it.
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"%s","size":%d}]}' \
    "$config_digest" "$config_size" "$layer_digest" "$layer_size" >"$dir/manifest.json"
  IMAGE_DIGEST="sha256:$(sha256sum "$dir/manifest.json" | cut -d' ' -f1)"
  served=$(http -X PUT -o /dev/null -D - \
    -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' \
    --data-binary "@$dir/manifest.json" "$REGISTRY/v2/$IMAGE_REPO/manifests/$TAG" |
    tr -d '\r' | sed -n 's/^[Dd]ocker-[Cc]ontent-[Dd]igest: //p')
  [ "$served" = "$IMAGE_DIGEST" ] ||
    fail "registry says the manifest is '$served', sha256sum says $IMAGE_DIGEST"
  echo "    manifest $IMAGE_DIGEST -> $IMAGE_REPO:$TAG"
}

# ===============================================================================================
step "2. Push $IMAGE_REPO:$TAG (first build) with curl"
# ===============================================================================================
push_image v1 "hello from sample/web 1.0, first build"
DIGEST1=$IMAGE_DIGEST
# tagpin resolve prints the digest the tag points to now: it must be the one just pushed.
echo "\$ tagpin --insecure-registry $REGISTRY_HOST resolve $REGISTRY_HOST/$IMAGE_REPO:$TAG"
resolved=$(timeout 60 "$TAGPIN" --insecure-registry "$REGISTRY_HOST" resolve "$REGISTRY_HOST/$IMAGE_REPO:$TAG")
echo "$resolved" | indent
[ "$resolved" = "$DIGEST1" ] || fail "tagpin resolve gave '$resolved', expected $DIGEST1"
ok "tagpin resolve agrees: $DIGEST1"

# ===============================================================================================
step "3. Create the GitOps repository (bare, file://) from examples/gitops"
# ===============================================================================================
mkdir -p "$WORK"
cp -R "$ROOT/examples/gitops/." "$WORK/"
# The sample names the registry 127.0.0.1:5000; point it at our port, and tagpin.yaml at BARE.
grep -rl '127\.0\.0\.1:5000' "$WORK" | while IFS= read -r f; do
  sed "s/127\.0\.0\.1:5000/$REGISTRY_HOST/g" "$f" >"$f.new" && mv "$f.new" "$f"
done
sed "s#https://github.com/YOUR-ORG/gitops.git#file://$BARE#" "$WORK/tagpin.yaml" >"$TMP/tagpin.yaml"
grep -q "url: file://$BARE\$" "$TMP/tagpin.yaml" || fail "could not set repository.url in tagpin.yaml"
mv "$TMP/tagpin.yaml" "$WORK/tagpin.yaml"
CONFIG="$WORK/tagpin.yaml"

git init -q --bare -b main "$BARE"
git -C "$WORK" init -q -b main
git -C "$WORK" add -A
git -C "$WORK" -c user.name=quickstart -c user.email=quickstart@example.com \
  commit -q -m "Sample GitOps repository"
git -C "$WORK" push -q "$BARE" main
git --git-dir="$BARE" ls-tree -r --name-only main | indent
[ "$(commits)" = 1 ] || fail "expected 1 commit in $BARE, found $(commits)"
ok "$BARE has 1 commit; tagpin.yaml points at it"

# run_sync: one `tagpin sync` pass (bounded by a timeout); prints its output, keeps it in
# SYNC_OUT and fails the quickstart unless it exits 0.
run_sync() {
  local status=0
  echo "\$ tagpin sync --config $CONFIG --cache-dir $TMP/cache"
  SYNC_OUT=$(timeout 120 "$TAGPIN" sync --config "$CONFIG" --cache-dir "$TMP/cache" 2>&1) || status=$?
  printf '%s\n' "$SYNC_OUT" | indent
  [ "$status" = 0 ] || fail "tagpin sync exited with $status, expected 0"
}

show_git() {
  echo "\$ git log --oneline main"
  git --no-pager --git-dir="$BARE" log --oneline main | indent
  echo "\$ git log -1 --format=%B main   # the message lists each image moved, old -> new"
  git --no-pager --git-dir="$BARE" log -1 --format=%B main | sed '/^$/d' | indent
  echo "\$ git diff main~1 main"
  git --no-pager --git-dir="$BARE" diff --no-color main~1 main | indent
}

# ===============================================================================================
step "4. Pass 1: tagpin sync pins $IMAGE_REPO:$TAG to its digest"
# ===============================================================================================
run_sync
grep -q "^committed .* to main" <<<"$SYNC_OUT" || fail "pass 1 did not report a commit"
[ "$(commits)" = 2 ] || fail "expected 2 commits after pass 1, found $(commits)"
show_git
git --git-dir="$BARE" show "main:$OVERLAY" | grep -q "digest: $DIGEST1\$" ||
  fail "$OVERLAY on main does not carry digest: $DIGEST1"
ok "one commit added; $OVERLAY pins $DIGEST1"

# ===============================================================================================
step "5. Push $IMAGE_REPO:$TAG again with different content (the tag moves)"
# ===============================================================================================
push_image v2 "hello from sample/web 1.0, rebuilt"
DIGEST2=$IMAGE_DIGEST
[ "$DIGEST2" != "$DIGEST1" ] || fail "the rebuilt image has the same digest"
ok "$IMAGE_REPO:$TAG moved: $DIGEST1 -> $DIGEST2"

# ===============================================================================================
step "6. Pass 2: tagpin sync moves the pin to the new digest (a one-line diff)"
# ===============================================================================================
run_sync
grep -q "^committed .* to main" <<<"$SYNC_OUT" || fail "pass 2 did not report a commit"
[ "$(commits)" = 3 ] || fail "expected 3 commits after pass 2, found $(commits)"
show_git
numstat=$(git --git-dir="$BARE" diff --numstat main~1 main)
[ "$numstat" = "$(printf '1\t1\t%s' "$OVERLAY")" ] ||
  fail "expected one line changed in $OVERLAY, got: $numstat"
git --git-dir="$BARE" show "main:$OVERLAY" | grep -q "digest: $DIGEST2\$" ||
  fail "$OVERLAY on main does not carry digest: $DIGEST2"
ok "one commit added, one line changed; $OVERLAY pins $DIGEST2"

# ===============================================================================================
step "7. Pass 3: nothing moved, so tagpin sync commits nothing"
# ===============================================================================================
run_sync
echo "\$ git log --oneline main"
git --no-pager --git-dir="$BARE" log --oneline main | indent
grep -q "nothing to pin" <<<"$SYNC_OUT" || fail "pass 3 did not report 'nothing to pin'"
[ "$(commits)" = 3 ] || fail "expected still 3 commits after pass 3, found $(commits)"
ok "nothing to pin; main still has 3 commits"

echo
echo "quickstart: all checks passed"
