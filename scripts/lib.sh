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
    cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
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

# Builds the server binaries with the given cargo profile flag ("" or --release).
build_server() {
  say "building the server ${1:-(debug)}"
  (cd "$ROOT" && cargo build -p tollgate-app --features ssr --bin tollgate ${1:-})
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
    -o "-p $PG_PORT -k $PG_DIR -h 127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" >/dev/null \
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
