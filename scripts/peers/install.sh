#!/usr/bin/env bash
# Idempotent installer for peer servers/clients used by scripts/peers/run.sh.
# Installs only what is missing, via apt:
#   ngtcp2-server  - ngtcp2 example HTTP/3 servers (gtlsserver = GnuTLS backend)
#   ngtcp2-client  - ngtcp2 example HTTP/3 clients (gtlsclient)
#   caddy          - Caddy web server (HTTP/3 + HTTP/2 + HTTP/1.1)
#   nginx-light    - nginx, minimal module set (HTTP/2 over TLS used here)
#   nghttp2-client - nghttp/h2load HTTP/2 client and load generator
# Not installed here (too slow for the first pass): TQUIC (cargo install tquic_tools),
# quic-go (Go program).
set -euo pipefail
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
