#!/usr/bin/env bash
# tagpin quickstart: one command, everything local, no cloud, no docker, no Kubernetes.
#
#   bash examples/quickstart.sh
#
# 1. starts a registry on 127.0.0.1:5000 (Debian's docker-registry; data in a temp dir),
# 2. pushes a tiny image sample/web:1.0 with the OCI push API, using only curl and sha256sum,
# 3. makes a bare Git repository from examples/gitops (copied to a temp dir first; nothing in
#    examples/ is written); its tagpin.yaml has two stages, staging then production,
# 4. pass 1: `tagpin sync` commits the digest of sample/web:1.0 to the staging overlay,
# 5. pushes sample/web:1.0 again with different content (the tag moves),
# 6. pass 2: `tagpin sync` commits a one-line change to the new digest,
# 7. pass 3: `tagpin sync` finds nothing to pin and commits nothing,
# 8. starts a DEMO CLUSTER for staging: examples/demo-cluster.py, a read-only stand-in for the
#    Kubernetes API that serves the Deployment and pods Argo CD would have created, from a state
#    file this script writes (there is no real cluster here; with one, tagpin.yaml's `cluster:`
#    names your kubeconfig context instead, and nothing else changes),
# 9. `tagpin promote --to production` while staging is still rolling out (a pod runs the old
#    digest): exit 3, nothing committed,
# 10. staging converged: `tagpin promote --to production` commits staging's tag and digest to
#    the production overlay,
# 11. `tagpin verify --stage production` on a second demo cluster, serving production as Argo CD
#    would run it after that commit: converged.
#
# It is also a test: it checks each result and exits non-zero if one is not as expected.
#
# What it needs and does not find (docker-registry, python3, curl, git) it installs with
# apt-get, as root or through sudo; where it cannot, it prints the command to run and stops.
#
# Environment:
#   TAGPIN            the tagpin binary (default: target/release/tagpin, else target/debug/tagpin,
#                     else it runs `cargo build --release`)
#   QUICKSTART_PORT   registry port on 127.0.0.1 (default 5000, else a free port if 5000 is
#                     taken); the demo clusters always take free ports
#   QUICKSTART_KEEP=1 keep the temp dir (registry data, Git repositories, demo cluster state
#                     and request logs) for a look afterwards
#   REGISTRY_BIN      the registry binary (default /usr/bin/docker-registry, installed if missing)

set -Eeuo pipefail
# Any command failing unexpectedly stops the quickstart with its line number.
trap 'fail "unexpected error at line $LINENO: $BASH_COMMAND"' ERR

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${QUICKSTART_PORT:-5000}"
REGISTRY_HOST="127.0.0.1:$PORT"
REGISTRY="http://$REGISTRY_HOST"
DEFAULT_REGISTRY_BIN=/usr/bin/docker-registry
REGISTRY_BIN="${REGISTRY_BIN:-$DEFAULT_REGISTRY_BIN}"
IMAGE_REPO="sample/web"
TAG="1.0"
OVERLAY="overlays/staging/kustomization.yaml"         # sync pins the first stage, staging
PROD_OVERLAY="overlays/production/kustomization.yaml" # promote carries staging's pin here
STAGING_NS="sample-staging"                           # the overlays' namespaces
PROD_NS="sample"

step() { printf '\n==> %s\n' "$*"; }
ok() { printf '    ok: %s\n' "$*"; }
fail() {
  printf '\nquickstart: FAILED: %s\n' "$*" >&2
  exit 1
}
indent() { sed 's/^/    /'; }

# --- Tools -------------------------------------------------------------------------------------
# apt_install PACKAGE...: installs Debian packages as .ci/run does, as root or through sudo
# (`sudo -n` when there is no terminal to ask for a password on). Fails when it cannot.
apt_install() {
  local sudo=()
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "cannot install $*: no apt-get here"
    return 1
  fi
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "cannot install $*: not root, and no sudo"
      return 1
    fi
    if [ -t 0 ]; then sudo=(sudo); else sudo=(sudo -n); fi
  fi
  echo "installing with apt-get: $*"
  ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

for tool in sha256sum tar gzip timeout; do # in every Debian (coreutils, tar, gzip)
  command -v "$tool" >/dev/null 2>&1 || fail "'$tool' is not installed"
done
need_apt=()
for tool in curl git python3; do # the package is named as the command
  command -v "$tool" >/dev/null 2>&1 || need_apt+=("$tool")
done
if [ ! -x "$REGISTRY_BIN" ]; then
  [ "$REGISTRY_BIN" = "$DEFAULT_REGISTRY_BIN" ] ||
    fail "REGISTRY_BIN=$REGISTRY_BIN is not an executable file"
  need_apt+=(docker-registry)
fi
# installed: whether every command asked for is there now.
installed() {
  local tool
  [ -x "$REGISTRY_BIN" ] || return 1
  for tool in curl git python3; do
    command -v "$tool" >/dev/null 2>&1 || return 1
  done
}
if [ "${#need_apt[@]}" -gt 0 ]; then
  if ! apt_install "${need_apt[@]}" || ! installed; then
    hint=""
    [ -x "$REGISTRY_BIN" ] || hint="
  (Without apt-get, set REGISTRY_BIN to a CNCF distribution 'registry' binary instead of
  docker-registry; it takes the same 'serve CONFIG'.)"
    fail "missing: ${need_apt[*]}, and they could not be installed here. Install them with:
  sudo apt-get update && sudo apt-get install -y ${need_apt[*]}
  then run this again.$hint"
  fi
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
DEMO_PIDS="" # the demo clusters' processes
cleanup() {
  local pid
  for pid in $REGISTRY_PID $DEMO_PIDS; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
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
# start_registry: starts the registry on $REGISTRY_HOST and waits (at most 20 s) until GET /v2/
# answers with a random id it was given: that proves whoever answers on the port is our
# registry. Fails if it does not come up (most likely: the port is taken).
start_registry() {
  local up="" _
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
    kill "$REGISTRY_PID" 2>/dev/null || true
    wait "$REGISTRY_PID" 2>/dev/null || true
    REGISTRY_PID=""
    return 1
  fi
}

# free_port: a loopback port that was free a moment ago.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

if ! start_registry; then
  if [ -z "${QUICKSTART_PORT:-}" ] && grep -qi "address already in use" "$TMP/registry.log"; then
    # On a machine with systemd, installing the docker-registry package also starts Debian's
    # own registry service on port 5000; this quickstart does not use it.
    echo "    $REGISTRY_HOST is taken (if by Debian's docker-registry service, which installing the"
    echo "    package starts: 'sudo systemctl disable --now docker-registry' stops it); trying a free port"
    PORT=$(free_port)
    REGISTRY_HOST="127.0.0.1:$PORT"
    REGISTRY="http://$REGISTRY_HOST"
    start_registry || {
      indent <"$TMP/registry.log" >&2
      fail "the registry did not start on $REGISTRY_HOST either"
    }
  else
    indent <"$TMP/registry.log" >&2
    fail "the registry did not start on $REGISTRY_HOST (port taken? set QUICKSTART_PORT to a free port)"
  fi
fi
ok "registry is up on $REGISTRY_HOST (pid $REGISTRY_PID, storage $TMP/registry-data)"

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
# The sample names the registry 127.0.0.1:5000; point it at our port, tagpin.yaml at BARE, and
# each stage's cluster at the kubeconfig of its demo cluster (written when it starts, step 8).
grep -rl '127\.0\.0\.1:5000' "$WORK" | while IFS= read -r f; do
  sed "s/127\.0\.0\.1:5000/$REGISTRY_HOST/g" "$f" >"$f.new" && mv "$f.new" "$f"
done
sed -e "s#https://github.com/YOUR-ORG/gitops.git#file://$BARE#" \
  -e "s#cluster: {context: staging}#cluster: {kubeconfig: $TMP/staging.kubeconfig}#" \
  -e "s#cluster: {context: production}#cluster: {kubeconfig: $TMP/production.kubeconfig}#" \
  "$WORK/tagpin.yaml" >"$TMP/tagpin.yaml"
grep -q "url: file://$BARE\$" "$TMP/tagpin.yaml" || fail "could not set repository.url in tagpin.yaml"
for stage in staging production; do
  grep -q "cluster: {kubeconfig: $TMP/$stage.kubeconfig}\$" "$TMP/tagpin.yaml" ||
    fail "could not set the cluster of stage $stage in tagpin.yaml"
done
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
echo "the stages in tagpin.yaml: sync pins staging from the registry; promote carries what"
echo "converged in staging to production"
sed -n '/^promotion:/,/^$/p' "$CONFIG" | grep -v -e '^ *#' -e '^$' | indent

# run_tagpin EXPECTED COMMAND ARGS...: one `tagpin COMMAND` (bounded by a timeout) with this
# quickstart's configuration and cache; prints the command and its output, keeps the output in
# OUT and fails the quickstart unless it exits with EXPECTED.
run_tagpin() {
  local expected=$1 command=$2 status=0
  shift 2
  echo "\$ tagpin $command --config $CONFIG --cache-dir $TMP/cache${*:+ $*}"
  OUT=$(timeout 120 "$TAGPIN" "$command" --config "$CONFIG" --cache-dir "$TMP/cache" "$@" 2>&1) ||
    status=$?
  printf '%s\n' "$OUT" | indent
  [ "$status" = "$expected" ] || fail "tagpin $command exited with $status, expected $expected"
}

# run_sync: one `tagpin sync` pass, which must exit 0; its output is in SYNC_OUT.
run_sync() {
  run_tagpin 0 sync
  SYNC_OUT=$OUT
}

# show_git [WHAT]: the log, the last commit's message (which lists WHAT) and its diff.
show_git() {
  echo "\$ git log --oneline main"
  git --no-pager --git-dir="$BARE" log --oneline main | indent
  echo "\$ git log -1 --format=%B main   # the message lists ${1:-each image moved, old -> new}"
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

# ===============================================================================================
# Promotion. `tagpin promote` moves digests to production only once staging's cluster runs
# them, so it reads staging's cluster. There is no Kubernetes here: examples/demo-cluster.py
# is a DEMO CLUSTER, a read-only stand-in for the Kubernetes API that serves, from a JSON state
# file this script writes, the Deployment and pods Argo CD would have created for a stage:
# their template, rollout status and each pod's imageID (the digest the node pulled). With a
# real cluster, the stage's `cluster:` in tagpin.yaml names your kubeconfig context instead
# (as examples/gitops/tagpin.yaml does), and nothing else changes.

# demo_state STAGE NAMESPACE TEMPLATE_DIGEST POD_DIGEST...: what STAGE's demo cluster serves:
# Deployment NAMESPACE/web (2 replicas) whose pod template names TEMPLATE_DIGEST, and one
# running, ready pod per POD_DIGEST, started from that digest. Replaced atomically: the demo
# cluster reads the file again when it changes.
demo_state() {
  local stage=$1 namespace=$2 template=$3 pods="" digest
  shift 3
  for digest in "$@"; do
    pods="$pods${pods:+,}
        {\"web\": \"$REGISTRY_HOST/$IMAGE_REPO:$TAG@$digest\"}"
  done
  cat >"$TMP/demo-$stage.json.new" <<EOF
{
  "cluster": "$stage",
  "deployments": [
    {
      "namespace": "$namespace",
      "name": "web",
      "replicas": 2,
      "containers": {"web": "$REGISTRY_HOST/$IMAGE_REPO:$TAG@$template"},
      "pods": [$pods
      ]
    }
  ]
}
EOF
  mv "$TMP/demo-$stage.json.new" "$TMP/demo-$stage.json"
}

# start_demo_cluster STAGE: starts STAGE's demo cluster on a free port (it picks one and writes
# its URL to a file), waits (at most 10 s) until it answers, and writes the kubeconfig
# tagpin.yaml names for STAGE: its server, no credentials.
start_demo_cluster() {
  local stage=$1 url="" pid _
  echo "\$ python3 examples/demo-cluster.py --state $TMP/demo-$stage.json --url-file $TMP/demo-$stage.url"
  python3 "$ROOT/examples/demo-cluster.py" --state "$TMP/demo-$stage.json" \
    --url-file "$TMP/demo-$stage.url" --log "$TMP/demo-$stage.log" 2>>"$TMP/demo-$stage.log" &
  pid=$!
  DEMO_PIDS="$DEMO_PIDS $pid"
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    if [ -s "$TMP/demo-$stage.url" ]; then
      url=$(cat "$TMP/demo-$stage.url")
      break
    fi
    sleep 0.2
  done
  if [ -z "$url" ] || ! http -o /dev/null "$url/version"; then
    indent <"$TMP/demo-$stage.log" >&2
    fail "the demo cluster for $stage did not start"
  fi
  cat >"$TMP/$stage.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: demo-$stage
    cluster: {server: "$url"}
users:
  - name: demo
    user: {}
contexts:
  - name: demo-$stage
    context: {cluster: demo-$stage, user: demo}
current-context: demo-$stage
EOF
  ok "demo cluster for $stage on $url (pid $pid); $TMP/$stage.kubeconfig points at it"
}

# ===============================================================================================
step "8. Start a demo cluster for staging, still rolling out to the new digest"
# ===============================================================================================
echo "    (a stand-in for the Kubernetes API: examples/demo-cluster.py; with a real cluster,"
echo "    tagpin.yaml's cluster: names your kubeconfig context and this step is not needed)"
# Argo CD has applied pass 2's commit: the template names DIGEST2, one pod runs it already,
# the other still runs DIGEST1.
demo_state staging "$STAGING_NS" "$DIGEST2" "$DIGEST1" "$DIGEST2"
start_demo_cluster staging
echo "    staging serves Deployment $STAGING_NS/web: template on ${DIGEST2:0:19}, one pod on"
echo "    ${DIGEST2:0:19}, one still on ${DIGEST1:0:19} (the old build)"

# ===============================================================================================
step "9. tagpin promote --to production: refused while staging is still rolling out"
# ===============================================================================================
asked_before=$(wc -l <"$TMP/demo-staging.log")
run_tagpin 3 promote --to production
grep -q "^staging -> production (progressing" <<<"$OUT" ||
  fail "tagpin promote did not say staging is progressing"
grep -q "nothing promoted" <<<"$OUT" || fail "tagpin promote did not say 'nothing promoted'"
[ "$(commits)" = 3 ] || fail "expected still 3 commits after a refused promotion, found $(commits)"
echo "    what tagpin asked staging's demo cluster: lists only (the 404s: no Argo CD or Flux objects"
echo "    to consult, as on a cluster without their CRDs)"
tail -n "+$((asked_before + 1))" "$TMP/demo-staging.log" | indent | indent
ok "exit 3: staging has not converged on its pin; nothing committed, main still has 3 commits"

# ===============================================================================================
step "10. Staging converged: tagpin promote commits its tag and digest to production"
# ===============================================================================================
demo_state staging "$STAGING_NS" "$DIGEST2" "$DIGEST2" "$DIGEST2"
echo "    staging's demo cluster now serves both pods on ${DIGEST2:0:19} (the rollout finished)"
run_tagpin 0 promote --to production
grep -q "^staging -> production (converged" <<<"$OUT" ||
  fail "tagpin promote did not say staging converged"
grep -q "^committed .* to main" <<<"$OUT" || fail "tagpin promote did not report a commit"
[ "$(commits)" = 4 ] || fail "expected 4 commits after the promotion, found $(commits)"
show_git "each image carried, and the evidence"
numstat=$(git --git-dir="$BARE" diff --numstat main~1 main)
[ "$numstat" = "$(printf '1\t0\t%s' "$PROD_OVERLAY")" ] ||
  fail "expected one line added to $PROD_OVERLAY, got: $numstat"
# Production's images: entry now says exactly what staging's says: same newTag, same digest.
images_of() { git --git-dir="$BARE" show "main:$1" | sed -n '/^images:/,$p'; }
[ "$(images_of "$PROD_OVERLAY")" = "$(images_of "$OVERLAY")" ] ||
  fail "the images: entries of $PROD_OVERLAY and $OVERLAY differ"
images_of "$PROD_OVERLAY" | grep -q "digest: $DIGEST2\$" ||
  fail "$PROD_OVERLAY on main does not carry digest: $DIGEST2"
ok "one commit added, one line added; $PROD_OVERLAY pins $TAG@$DIGEST2, as staging does"

# ===============================================================================================
step "11. tagpin verify --stage production: production runs the promoted digest"
# ===============================================================================================
# A second demo cluster, for production: what Argo CD runs after applying the promotion commit.
demo_state production "$PROD_NS" "$DIGEST2" "$DIGEST2" "$DIGEST2"
start_demo_cluster production
run_tagpin 0 verify --stage production --branch main
grep -qi "converged" <<<"$OUT" || fail "tagpin verify did not say converged"
ok "exit 0: production converged on $DIGEST2"

echo
echo "quickstart: all checks passed"
