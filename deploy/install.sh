#!/bin/sh
# Installs halo-gateway on a companion computer (docs/deploy.md):
#
#   PREFIX/bin/halo-gateway                         the flight binary
#   /etc/halo-gateway/config.toml                   the configuration (kept if it exists; a new
#                                                   one starts from configs/pixhawk-telem2.toml)
#   PREFIX/share/halo-gateway/configs/*.toml        every annotated example
#   PREFIX/share/halo-gateway/catalogs/*.toml       the catalogs and the contract domain
#   PREFIX/share/doc/halo-gateway/*.md              the documentation
#   /etc/systemd/system/halo-gateway.service        the unit, with PREFIX's paths
#
# and, on the machine itself (no DESTDIR), the system user `halo-gateway` (in group dialout for
# the serial port) and a `systemctl daemon-reload`. It enables and starts nothing.
#
# Usage: [DESTDIR=DIR] [PREFIX=/usr/local] deploy/install.sh [BINARY]
#   BINARY   the flight binary to install; by default the first of
#            target/dist/halo-gateway (built on this machine with
#            `cargo build --profile dist -p halo-gateway`) and
#            target/aarch64-unknown-linux-gnu/dist/halo-gateway (scripts/build_aarch64.sh)
#   DESTDIR  install into this directory as if it were / (packaging, tests): no user is
#            created and systemd is not touched
set -eu
cd "$(dirname "$0")/.."

PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
USER_NAME=halo-gateway

case "$PREFIX" in
  /*) ;;
  *) echo "error: PREFIX must be an absolute path (got \`$PREFIX\`)" >&2; exit 2 ;;
esac

if [ $# -gt 1 ]; then
  echo "usage: [DESTDIR=DIR] [PREFIX=/usr/local] deploy/install.sh [BINARY]" >&2
  exit 2
fi
BIN=${1:-}
if [ -z "$BIN" ]; then
  for b in target/dist/halo-gateway target/aarch64-unknown-linux-gnu/dist/halo-gateway; do
    if [ -x "$b" ]; then BIN=$b; break; fi
  done
fi
if [ -z "$BIN" ] || [ ! -x "$BIN" ]; then
  echo "error: no flight binary to install${BIN:+ (\`$BIN\` is not an executable file)}." >&2
  echo "  build one: cargo build --profile dist -p halo-gateway   (on the companion)" >&2
  echo "         or: scripts/build_aarch64.sh --binary-only          (cross, from x86_64)" >&2
  exit 2
fi
if [ -z "$DESTDIR" ] && [ "$(id -u)" != 0 ]; then
  echo "error: installing to / needs root (sudo deploy/install.sh), or set DESTDIR" >&2
  exit 2
fi

root=$DESTDIR
echo "==> installing $BIN to $root$PREFIX/bin/halo-gateway"
install -d -m 0755 "$root$PREFIX/bin" "$root$PREFIX/share/halo-gateway/configs" \
  "$root$PREFIX/share/halo-gateway/catalogs" "$root$PREFIX/share/doc/halo-gateway" \
  "$root/etc/halo-gateway" "$root/etc/systemd/system"
install -m 0755 "$BIN" "$root$PREFIX/bin/halo-gateway"

echo "==> examples, catalogs and documentation under $root$PREFIX/share"
install -m 0644 configs/*.toml "$root$PREFIX/share/halo-gateway/configs/"
install -m 0644 catalogs/uav-px4.toml catalogs/crazyflie.toml catalogs/contract-uav.toml \
  "$root$PREFIX/share/halo-gateway/catalogs/"
install -m 0644 README.md docs/deploy.md docs/run.md docs/px4.md docs/crazyflie.md \
  docs/console.md docs/mcp.md docs/envelope.md docs/catalog.md \
  "$root$PREFIX/share/doc/halo-gateway/"

conf="$root/etc/halo-gateway/config.toml"
if [ -e "$conf" ]; then
  echo "==> keeping the existing $conf"
else
  echo "==> $conf (from configs/pixhawk-telem2.toml: edit vehicle.url and listen.http)"
  install -m 0640 configs/pixhawk-telem2.toml "$conf"
fi

echo "==> $root/etc/systemd/system/halo-gateway.service"
sed -e "s|/usr/local/bin/halo-gateway|$PREFIX/bin/halo-gateway|g" deploy/halo-gateway.service \
  > "$root/etc/systemd/system/halo-gateway.service"
chmod 0644 "$root/etc/systemd/system/halo-gateway.service"

if [ -n "$DESTDIR" ]; then
  echo "==> DESTDIR is set: no user created, systemd not reloaded"
else
  if ! getent passwd "$USER_NAME" >/dev/null 2>&1; then
    echo "==> system user $USER_NAME (group dialout for the serial port)"
    useradd --system --user-group --home-dir /var/lib/halo-gateway --no-create-home \
      --shell /usr/sbin/nologin "$USER_NAME"
  fi
  usermod -a -G dialout "$USER_NAME"
  chgrp "$USER_NAME" "$conf"
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
  fi
fi

"$root$PREFIX/bin/halo-gateway" --version >/dev/null 2>&1 \
  || echo "note: the installed binary does not run on this machine (a cross build?)"
cat <<EOF
installed. Next:
  1. edit /etc/halo-gateway/config.toml (vehicle.url, listen.http; \`halo-gateway config example
     pixhawk-telem2\` prints it afresh) and check it:
       sudo -u $USER_NAME $PREFIX/bin/halo-gateway run --check --config /etc/halo-gateway/config.toml
  2. sudo systemctl enable --now halo-gateway
  3. journalctl -u halo-gateway -f   (the banner: listeners, credentials, receipts)
EOF
