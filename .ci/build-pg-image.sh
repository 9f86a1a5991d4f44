#!/usr/bin/env bash
# Builds the local Docker image twice-postgres:ci from this machine's
# PostgreSQL 15, for the Docker mode of internal/pgserver: CI has no
# registry, so no official image can be pulled.
#
# The image is FROM scratch: the server binaries, their share dir, the
# shared libraries ldd lists, a minimal /etc/passwd and the static
# entrypoint of .ci/pgimage. `docker import` makes it, so no builder
# (BuildKit/buildx) is needed on the old engine. Runs as root; installs
# postgresql-15 first when it is missing.
set -euo pipefail

tag=${1:-twice-postgres:ci}
root=$(cd "$(dirname "$0")/.." && pwd)
pg=/usr/lib/postgresql/15

if [ ! -x "$pg/bin/postgres" ]; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
mkdir -p "$rootfs"/{etc,tmp,var/lib/postgresql,var/run/postgresql,usr/share}

# Binaries the image runs; JIT is left out (it would pull in LLVM).
mkdir -p "$rootfs$pg"
cp -a "$pg/bin" "$rootfs$pg/"
cp -a "$pg/lib" "$rootfs$pg/"
rm -rf "$rootfs$pg/lib/llvmjit"* "$rootfs$pg/lib/bitcode"
mkdir -p "$rootfs/usr/share/postgresql"
cp -a /usr/share/postgresql/15 "$rootfs/usr/share/postgresql/"
cp -a /usr/share/zoneinfo "$rootfs/usr/share/"
# initdb and the server run helpers through popen: /bin/sh, `locale -a`.
mkdir -p "$rootfs/bin" "$rootfs/usr/bin"
cp -L /bin/sh "$rootfs/bin/sh"
cp -L /usr/bin/locale "$rootfs/usr/bin/locale"

# Every shared library any of them needs, at the path the loader expects.
find "$rootfs$pg" "$rootfs/bin" "$rootfs/usr/bin" -type f \( -perm -u+x -o -name '*.so' \) -print0 |
	{ xargs -0 ldd 2>/dev/null || true; } |
	awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*[^:]$/ && $2 ~ /^\(/ { print $1 }' |
	sort -u |
	while read -r lib; do
		mkdir -p "$rootfs$(dirname "$lib")"
		cp -L "$lib" "$rootfs$lib"
	done
# /lib64 -> /usr/lib64 style symlinks differ between hosts; the loader path is fixed.
if [ ! -e "$rootfs/lib64/ld-linux-x86-64.so.2" ]; then
	mkdir -p "$rootfs/lib64"
	cp -L /lib64/ld-linux-x86-64.so.2 "$rootfs/lib64/"
fi

cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
postgres:x:999:999:PostgreSQL:/var/lib/postgresql:/sbin/nologin
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
postgres:x:999:
EOF
chmod 1777 "$rootfs/tmp"
chown -R 999:999 "$rootfs/var/lib/postgresql" "$rootfs/var/run/postgresql"

(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$rootfs/entrypoint" ./.ci/pgimage)

tar -C "$rootfs" -c . | docker import \
	--change 'ENTRYPOINT ["/entrypoint"]' \
	--change 'CMD ["postgres"]' \
	--change 'ENV PGDATA=/var/lib/postgresql/data PATH=/usr/lib/postgresql/15/bin:/usr/bin:/bin' \
	--change 'EXPOSE 5432' \
	- "$tag" >/dev/null
echo "built $tag ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
