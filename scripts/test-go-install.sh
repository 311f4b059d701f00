#!/usr/bin/env bash
# Proves that `go install github.com/tributary-run/tributary/cmd/tributary@COMMIT`
# works from the module alone (no replace directives, no cgo, no files
# outside the module): it serves HEAD as a module version from a local file
# proxy (the module is not published where this machine can reach), in front
# of the machine's Go module proxy for the dependencies, and installs it with
# a fresh GOPATH and module cache and CGO_ENABLED=0. Part of `make chaos`:
# downloading every dependency into an empty cache takes a while.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
say() { printf 'go-install test: %s\n' "$*"; }
module=$(cd "$root" && go list -m)
commit=$(git -C "$root" rev-parse HEAD)
short=${commit:0:12}
stamp=$(TZ=UTC git -C "$root" show -s --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)
version="v0.0.0-$stamp-$short"
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
dir="$tmp/proxy/$module/@v"
mkdir -p "$dir"
time=$(TZ=UTC git -C "$root" show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
printf '{"Version":"%s","Time":"%s"}\n' "$version" "$time" >"$dir/$version.info"
cp "$dir/$version.info" "$dir/$short.info" # what a query by commit asks for
echo "$version" >"$dir/list"
git -C "$root" show HEAD:go.mod >"$dir/$version.mod"
git -C "$root" archive --format=tar HEAD | python3 -c '
import io, sys, tarfile, zipfile
prefix = sys.argv[1] + "@" + sys.argv[2] + "/"
with tarfile.open(fileobj=io.BytesIO(sys.stdin.buffer.read())) as tar, zipfile.ZipFile(sys.argv[3], "w", zipfile.ZIP_DEFLATED) as z:
    for m in tar.getmembers():
        if m.isfile():
            z.writestr(prefix + m.name, tar.extractfile(m).read())
' "$module" "$version" "$dir/$version.zip"
upstream=$(go env GOPROXY)
say "serving $module@$version (commit $short) from $tmp/proxy, dependencies from $upstream"
start=$SECONDS
(cd "$tmp" && env -u GOFLAGS GOPATH="$tmp/gopath" GOMODCACHE="$tmp/gopath/pkg/mod" GOCACHE="$tmp/gocache" \
	GOPROXY="file://$tmp/proxy,$upstream" GONOSUMDB="$module" GONOSUMCHECK=1 GOFLAGS=-modcacherw CGO_ENABLED=0 \
	go install "$module/cmd/tributary@$short") >"$tmp/install.log" 2>&1 || {
	tail -30 "$tmp/install.log"
	say "FAIL: go install $module/cmd/tributary@$short"
	exit 1
}
bin="$tmp/gopath/bin/tributary"
[ -x "$bin" ] || { say "FAIL: no binary at $bin"; exit 1; }
"$bin" --help >/dev/null || { say "FAIL: the installed binary does not run"; exit 1; }
say "ok: go install $module/cmd/tributary@$short ($version) with CGO_ENABLED=0 into an empty GOPATH in $((SECONDS - start)) s; the binary runs"
