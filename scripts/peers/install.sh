#!/usr/bin/env bash
# Idempotent installer for peer servers/clients used by scripts/peers/run.sh.
# Installs only what is missing, via apt:
#   ngtcp2-server  - ngtcp2 example HTTP/3 servers (gtlsserver = GnuTLS backend)
#   ngtcp2-client  - ngtcp2 example HTTP/3 clients (gtlsclient)
#   caddy          - Caddy web server (HTTP/3 + HTTP/2 + HTTP/1.1)
#   nginx-light    - nginx, minimal module set (HTTP/2 over TLS used here)
#   nghttp2-client - nghttp/h2load HTTP/2 client and load generator
# With --with-tquic also TQUIC's tools (tquic_server, tquic_client) into /opt/tquic/bin via
# `cargo install tquic_tools --locked` (about 4.5 minutes on 2 cores; BoringSSL needs cmake).
# quic-go is built by the run scripts from scripts/peers/quicgo (Go and the Go module proxy).
set -euo pipefail
WITH_TQUIC=""
[ "${1:-}" = "--with-tquic" ] && WITH_TQUIC=1
PKGS=(ngtcp2-server ngtcp2-client caddy nginx-light nghttp2-client)
missing=()
for p in "${PKGS[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "already installed: $p"
  else
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # --no-install-recommends keeps it small; policy-rc.d prevents services auto-starting.
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
dpkg -l "${PKGS[@]}" | grep '^ii' || true
if [ -n "$WITH_TQUIC" ]; then
  if [ -x /opt/tquic/bin/tquic_server ] && [ -x /opt/tquic/bin/tquic_client ]; then
    echo "already installed: tquic_tools ($(/opt/tquic/bin/tquic_server --version))"
  else
    command -v cmake >/dev/null || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; apt-get install -y -qq --no-install-recommends cmake; }
    cargo install tquic_tools --locked --root /opt/tquic
  fi
fi
