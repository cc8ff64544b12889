#!/usr/bin/env bash
# deploy.package: scripts/package-deb builds a Debian package whose contents, metadata, units
# and maintainer scripts are right, and whose packaged options start a real server and a real
# agent (paths moved into a scratch directory; the node is a fake 8-GPU one). Nothing is
# installed on this machine.
#   tests/deploy/package_test.sh ALLOT_BINARY
set -euo pipefail
allot=$(realpath "$1")
repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

deb=$("$repo/scripts/package-deb" --binary "$allot" --out "$tmp/out")
[ -f "$deb" ] || fail "no package at '$deb'"
version=$("$allot" version | awk '{print $NF}')
[[ "$(basename "$deb")" == "allot_${version}_$(dpkg --print-architecture).deb" ]] ||
  fail "package named $(basename "$deb")"

# Metadata: the version of the binary, the libraries' packages and adduser.
info=$(dpkg-deb -I "$deb")
grep -q "^ Package: allot$" <<<"$info" || fail "no Package: allot"
grep -q "^ Version: $version$" <<<"$info" || fail "Version is not $version"
for dep in libsqlite3-0 libpq5 libyaml-cpp adduser libstdc++6; do
  grep -q "^ Depends:.*$dep" <<<"$info" || fail "Depends lacks $dep: $(grep Depends <<<"$info")"
done

# Contents, modes and conffiles.
contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/allot ./lib/systemd/system/allot-server.service \
  ./lib/systemd/system/allot-agent.service ./etc/allot/server.env ./etc/allot/agent.env \
  ./usr/share/doc/allot/deploy.md; do
  grep -q " $f$" <<<"$contents" || fail "the package lacks $f"
done
grep -q "^-rw-r----- root/root .* ./etc/allot/server.env$" <<<"$contents" ||
  fail "server.env is not 0640 root: $(grep server.env <<<"$contents")"
dpkg-deb -e "$deb" "$tmp/control"
[ "$(cat "$tmp/control/conffiles")" = "$(printf '/etc/allot/server.env\n/etc/allot/agent.env')" ] ||
  fail "conffiles: $(cat "$tmp/control/conffiles")"
for s in postinst prerm postrm; do
  [ -x "$tmp/control/$s" ] || fail "$s is not executable"
  sh -n "$tmp/control/$s" || fail "$s is not valid sh"
done

root=$tmp/root
dpkg-deb -x "$deb" "$root"
"$root/usr/bin/allot" version | grep -q "$version" || fail "the packaged binary does not run"

# The units, as systemd reads them (where systemd-analyze exists): any remark (an unknown key,
# a bad value, a missing binary) fails. A copy runs the extracted binary.
if command -v systemd-analyze >/dev/null; then
  mkdir -p "$tmp/units"
  for u in allot-server allot-agent; do
    sed "s#/usr/bin/allot#$root/usr/bin/allot#" "$root/lib/systemd/system/$u.service" \
      >"$tmp/units/$u.service"
    out=$(systemd-analyze verify --man=no "$tmp/units/$u.service" 2>&1) ||
      fail "systemd-analyze verify $u: $out"
    [ -z "$out" ] || fail "systemd-analyze verify $u: $out"
  done
else
  echo "note: no systemd-analyze here; the units were not verified by systemd"
fi
grep -q '^ExecStart=/usr/bin/allot server $ALLOT_SERVER_OPTIONS$' \
  "$root/lib/systemd/system/allot-server.service" || fail "allot-server's ExecStart"
grep -q '^ExecStart=/usr/bin/allot agent $ALLOT_AGENT_OPTIONS$' \
  "$root/lib/systemd/system/allot-agent.service" || fail "allot-agent's ExecStart"

# The packaged options, with /var/lib/allot and /etc/allot moved here and a free port: the
# server starts, writes its admin token 0600, and an agent started with the packaged agent
# options and a token made as docs/deploy.md says registers its node.
options() {  # FILE VAR: the variable's value in the env file, paths and port moved
  (set -a; . "$1"; eval "printf '%s' \"\$$2\"") |
    sed -e "s#/var/lib/allot#$tmp/state#g" -e "s#/etc/allot#$tmp/etc#g" -e "s#--port 7400#--port 0#"
}
mkdir -p "$tmp/state" "$tmp/etc"
chmod 700 "$tmp/state"
read -r -a server_opts <<<"$(options "$root/etc/allot/server.env" ALLOT_SERVER_OPTIONS)"
"$allot" server "${server_opts[@]}" --addr-file "$tmp/addr" >"$tmp/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/addr" ] && break; sleep 0.1; done
[ -s "$tmp/addr" ] || fail "the server did not start: $(cat "$tmp/server.log")"
addr=$(cat "$tmp/addr")
[ "$(stat -c %a "$tmp/state/admin-token")" = 600 ] || fail "admin-token is not 0600"
python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/api/v1/health", timeout=5)' \
  "$addr" || fail "no answer from $addr/api/v1/health"

export ALLOT_ADDR=$addr
"$allot" token create node1 --role agent --scope node1 --token-file "$tmp/state/admin-token" \
  >"$tmp/etc/agent-token" 2>/dev/null
chmod 600 "$tmp/etc/agent-token"
read -r -a agent_opts <<<"$(options "$root/etc/allot/agent.env" ALLOT_AGENT_OPTIONS)"
# The packaged --server is the local default; this server listens on a free port.
for i in "${!agent_opts[@]}"; do
  [ "${agent_opts[$i]}" = --server ] && agent_opts[i+1]=$addr
done
"$allot" agent "${agent_opts[@]}" --node node1 --backend "fake:$repo/examples/agent/h100-node.yaml" \
  --run-jobs-as agent >"$tmp/agent.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  if "$allot" nodes --token-file "$tmp/state/admin-token" --json 2>/dev/null | grep -q '"node1"'; then
    echo "ok: package $(basename "$deb"), $(wc -c <"$deb") bytes; server and agent start from its options"
    exit 0
  fi
  sleep 0.1
done
fail "the agent's node never registered: $(cat "$tmp/agent.log")"
